import type Anthropic from '@anthropic-ai/sdk';
import { ProviderError } from '../contracts/errors.js';
import type { ModelMessage } from '../contracts/message.js';
import type { ToolSpec } from '../contracts/tools.js';
import { textOnlyContent } from './content-support.js';
import { anthropicBlocks } from './anthropic-content.js';
import { asRecord } from './shared.js';

type Param = Anthropic.Messages.MessageParam;
type Block = Record<string, unknown> & { type: string };

/** Parses tool-call arguments into the object `tool_use.input` needs; `{}` when not a JSON object. */
export function parseToolInput(text: string): Record<string, unknown> {
  try {
    return asRecord(JSON.parse(text)) ?? {};
  } catch {
    return {};
  }
}

/** The assistant message's content blocks: verbatim from providerData when it still matches the message. */
function assistantBlocks(m: ModelMessage): Block[] {
  const text = textOnlyContent('anthropic', m.content, 'assistant');
  const calls = m.toolCalls ?? [];
  const stored = asRecord(m.providerData?.anthropic)?.content;
  const raw = Array.isArray(stored) ? (stored.filter((b) => typeof asRecord(b)?.type === 'string') as Block[]) : [];
  const rawText = raw
    .filter((b) => b.type === 'text')
    .map((b) => String(b.text ?? ''))
    .join('');
  const rawCalls = raw.filter((b) => b.type === 'tool_use');
  const matches =
    raw.length > 0 &&
    rawText === text &&
    rawCalls.length === calls.length &&
    rawCalls.every((b, i) => b.id === calls[i].id && b.name === calls[i].name);
  if (matches) {
    return raw
      .filter((b) => !(b.type === 'text' && b.text === ''))
      .map((b) => (b.type === 'text' && b.citations == null ? { type: 'text', text: b.text } : b));
  }
  // The message was changed since: keep the thinking blocks, rebuild the rest from the message.
  const blocks: Block[] = raw.filter((b) => b.type === 'thinking' || b.type === 'redacted_thinking');
  if (text) blocks.push({ type: 'text', text });
  for (const c of calls) blocks.push({ type: 'tool_use', id: c.id, name: c.name, input: parseToolInput(c.arguments) });
  return blocks;
}

/**
 * Maps actorloop messages to the Messages API: system messages join the `system` param; tool
 * results become `tool_result` blocks in a user message (placed first); consecutive same-role
 * messages merge so that user and assistant alternate.
 * @example
 * toAnthropicMessages([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }])
 * // { system: 'Be brief.', messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }] }
 * @internal SDK-typed; not in the published declarations
 */
export function toAnthropicMessages(messages: readonly ModelMessage[]): { system?: string; messages: Param[] } {
  const system: string[] = [];
  const out: { role: 'user' | 'assistant'; content: Block[] }[] = [];
  const push = (role: 'user' | 'assistant', blocks: Block[]) => {
    if (blocks.length === 0) return;
    const last = out.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  };
  for (const m of messages) {
    if (m.role === 'system') system.push(textOnlyContent('anthropic', m.content, 'system'));
    else if (m.role === 'user') push('user', anthropicBlocks(m.content));
    else if (m.role === 'assistant') push('assistant', assistantBlocks(m));
    else {
      if (!m.toolCallId) throw new ProviderError('anthropic: a tool message has no toolCallId', { retryable: false, code: 'bad_request' });
      push('user', [
        {
          type: 'tool_result',
          tool_use_id: m.toolCallId,
          ...(typeof m.content !== 'string' ? { content: anthropicBlocks(m.content) } : m.content ? { content: m.content } : {}),
          ...(m.isError ? { is_error: true } : {}),
        },
      ]);
    }
  }
  for (const msg of out) {
    if (msg.role === 'user')
      msg.content = [...msg.content.filter((b) => b.type === 'tool_result'), ...msg.content.filter((b) => b.type !== 'tool_result')];
  }
  return { ...(system.length ? { system: system.join('\n\n') } : {}), messages: out as unknown as Param[] };
}

/**
 * Maps tool specs to `{ name, description, input_schema }`.
 * @example
 * toAnthropicTools([{ name: 'add', description: 'Adds', parameters: { type: 'object' } }])
 * @internal SDK-typed; not in the published declarations
 */
export const toAnthropicTools = (tools: readonly ToolSpec[]) =>
  tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters as Anthropic.Messages.Tool.InputSchema }));
