import type OpenAI from 'openai';
import { contentText, type Content, type ContentPart } from '../contracts/content.js';
import { ProviderError } from '../contracts/errors.js';
import type { ModelMessage as Message } from '../contracts/message.js';
import type { ToolSpec } from '../contracts/tools.js';
import { assertMediaType, dataUrl, OPENAI_CONTENT } from './content-support.js';
import { asRecord } from './shared.js';

/**
 * Maps actorloop messages to Responses API input items (the request's `input`), and content
 * parts to `input_text` / `input_image` / `input_file`.
 */

type InputItem = OpenAI.Responses.ResponseInputItem;
type InputPart = OpenAI.Responses.ResponseInputContent;
type Item = Record<string, unknown> & { type: string };

/**
 * Maps content parts to Responses input content: text → `input_text`; an image URL →
 * `input_image { image_url }`; image bytes → `input_image` with a `data:` URL; file bytes →
 * `input_file { file_data: data URL, filename }` (named `file.<subtype>` when the part has no name).
 * Bytes of a media type the API does not take (images: png, jpeg, gif, webp; files: PDF, as on
 * Chat Completions) are refused before any request: `ProviderError` `unsupported_content`.
 * @example
 * toResponsesParts([{ type: 'image', url: 'https://example.com/cat.png' }])
 * // [{ type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'auto' }]
 * @internal SDK-typed; not in the published declarations
 */
export function toResponsesParts(parts: readonly ContentPart[]): InputPart[] {
  return parts.map((p): InputPart => {
    switch (p.type) {
      case 'text':
        return { type: 'input_text', text: p.text };
      case 'image':
        if ('url' in p) return { type: 'input_image', image_url: p.url, detail: 'auto' };
        assertMediaType('openai-responses', 'image', p.mediaType, OPENAI_CONTENT.image);
        return { type: 'input_image', image_url: dataUrl(p.mediaType, p.data), detail: 'auto' };
      case 'file':
        assertMediaType('openai-responses', 'file', p.mediaType, OPENAI_CONTENT.file);
        return {
          type: 'input_file',
          file_data: dataUrl(p.mediaType, p.data),
          filename: p.filename ?? `file.${p.mediaType.split('/')[1]}`,
        };
    }
  });
}

/** A message's content as the adapter reads it: text, or parts resolved (docs/providers.md, "Content parts"). */
const contentOf = (m: Message): Content => m.content;

/** A user message's or a tool result's content: the string as it is, or its parts mapped. */
const userContent = (m: Message): string | InputPart[] => {
  const c = contentOf(m);
  return typeof c === 'string' ? c : toResponsesParts(c);
};

/** The text of a system or assistant message; an image or file part there is refused before the call (the API takes none). */
const textOnly = (m: Message): string => {
  const c = contentOf(m);
  const other = typeof c === 'string' ? undefined : c.find((p) => p.type !== 'text');
  if (other)
    throw new ProviderError(`openai-responses: a ${m.role} message cannot carry a ${other.type} part`, {
      retryable: false,
      code: 'unsupported_content',
    });
  return contentText(c);
};

const isItem = (v: unknown): v is Item => typeof asRecord(v)?.type === 'string';

/** The text of an output message item: its `output_text` parts joined. */
const outputText = (item: Item): string =>
  (Array.isArray(item.content) ? item.content : [])
    .map((c) => asRecord(c))
    .filter((c) => c?.type === 'output_text')
    .map((c) => String(c?.text ?? ''))
    .join('');

/**
 * The input items of an assistant message: the output items kept in `providerData.openaiResponses.output`
 * verbatim (reasoning items with their encrypted content first, as the model produced them) when
 * they still match the message, with each call's arguments taken from the message; otherwise the
 * kept reasoning items, then the text, then one `function_call` per tool call.
 */
function assistantItems(m: Message): Item[] {
  const calls = m.toolCalls ?? [];
  const text = textOnly(m);
  const stored = asRecord(m.providerData?.openaiResponses)?.output;
  const raw = Array.isArray(stored) ? stored.filter(isItem) : [];
  const rawCalls = raw.filter((i) => i.type === 'function_call');
  const matches =
    raw.length > 0 &&
    raw
      .filter((i) => i.type === 'message')
      .map(outputText)
      .join('') === text &&
    rawCalls.length === calls.length &&
    rawCalls.every((i, n) => i.call_id === calls[n].id && i.name === calls[n].name);
  if (matches) {
    let n = 0;
    return raw.map((i) => (i.type === 'function_call' ? { ...i, arguments: calls[n++].arguments } : i));
  }
  // The message was changed since: keep the reasoning items, rebuild the rest from the message.
  const items: Item[] = raw.filter((i) => i.type === 'reasoning');
  if (text) items.push({ type: 'message', role: 'assistant', content: text });
  for (const c of calls) items.push({ type: 'function_call', call_id: c.id, name: c.name, arguments: c.arguments });
  return items;
}

/**
 * Maps actorloop messages to Responses input items: system → `{ role: systemRole, content }`,
 * user → `{ role: 'user', content }` (content parts mapped by `toResponsesParts`), assistant →
 * its output items (see `assistantItems`), tool → `function_call_output { call_id, output }`.
 * @example
 * toResponsesInput([{ role: 'tool', toolCallId: 'call_1', content: 'sunny' }])
 * // [{ type: 'function_call_output', call_id: 'call_1', output: 'sunny' }]
 * @internal SDK-typed; not in the published declarations
 */
export function toResponsesInput(messages: readonly Message[], systemRole: 'system' | 'developer' = 'system'): InputItem[] {
  const out: Item[] = [];
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        out.push({ type: 'message', role: systemRole, content: textOnly(m) });
        break;
      case 'user':
        out.push({ type: 'message', role: 'user', content: userContent(m) });
        break;
      case 'assistant':
        out.push(...assistantItems(m));
        break;
      case 'tool':
        if (!m.toolCallId)
          throw new ProviderError('openai-responses: a tool message has no toolCallId', { retryable: false, code: 'bad_request' });
        out.push({ type: 'function_call_output', call_id: m.toolCallId, output: userContent(m) });
        break;
    }
  }
  return out as unknown as InputItem[];
}

/**
 * Maps tool specs to Responses function tools `{ type: 'function', name, description, parameters, strict: false }`
 * (not strict: the API would otherwise hold optional properties to strict mode's rules).
 * @example
 * toResponsesTools([{ name: 'add', description: 'Adds', parameters: { type: 'object' } }])
 * @internal SDK-typed; not in the published declarations
 */
export const toResponsesTools = (tools: readonly ToolSpec[]): OpenAI.Responses.FunctionTool[] =>
  tools.map((t) => ({ type: 'function', name: t.name, description: t.description, parameters: t.parameters, strict: false }));
