import { z } from 'zod';
import { InputContent, StoredContent, type Content } from './content.js';
import { IdInput } from './ids.js';
import { JsonObject } from './json.js';

/**
 * Provider-specific data kept verbatim and sent back on the next request (e.g. thinking blocks):
 * a JSON object (a provider response whose data is not JSON is an `invalid_response`).
 */
export const ProviderData = JsonObject;
export type ProviderData = z.infer<typeof ProviderData>;

/** One tool call the model asked for. `arguments` is the raw JSON text, validated by the runtime. */
export const ToolCall = z.object({
  id: IdInput,
  name: z.string(),
  arguments: z.string(),
});
export type ToolCall = z.infer<typeof ToolCall>;

/**
 * A chat message (the seed's `Message`, camelCased). `content` is text, or parts (content.ts)
 * whose bytes are blob references: the form the log and a session's surface keep.
 */
export const Message = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: StoredContent,
  toolCalls: z.array(ToolCall).optional(),
  toolCallId: IdInput.optional(),
  name: z.string().optional(),
  /** On a `tool` message: the result is an error (Anthropic sends it as `is_error`). */
  isError: z.boolean().optional(),
  providerData: ProviderData.optional(),
});
export type Message = z.infer<typeof Message>;

/** Provider data given by an app: it is logged, so it must be JSON (no BigInt, function, undefined, cycle). */
const JsonProviderData = JsonObject;

/**
 * A message as a model provider receives it (`ModelRequest.messages`): every part resolved, bytes
 * as base64 (content.ts's `Content`).
 */
export type ModelMessage = Omit<Message, 'content'> & { content: Content };

/**
 * A message an app hands in (bootstrap messages, checkpoints): a Message that is all JSON, no
 * unknown key. Its parts are text, image URLs or parts stored already (blob references); bytes
 * enter through prompts, inputs and tool results, which store them first.
 */
export const InputMessage = z.strictObject({ ...Message.shape, providerData: JsonProviderData.optional() });

/** A problem of a message history: the path from the history (`[index, 'toolCallId']`) and what is wrong. */
export interface HistoryIssue {
  path: (string | number)[];
  message: string;
}

/**
 * Where tool calls and results of `messages` do not pair up as providers require: `toolCalls` on
 * an assistant message only and `toolCallId` on a tool message only; each tool message names a
 * call of the assistant message its run of tool messages follows directly, and answers it once;
 * an assistant message's call ids differ; every call is answered before the next message that is
 * not a tool result (or the history's end). Call ids may repeat across assistant messages.
 * @example
 * toolPairingIssues([{ role: 'tool', content: 'x' }]) // [{ path: [0, 'toolCallId'], message: … }]
 */
export function toolPairingIssues(messages: readonly Pick<Message, 'role' | 'toolCalls' | 'toolCallId'>[]): HistoryIssue[] {
  const issues: HistoryIssue[] = [];
  // the calls of the assistant message the current run of tool messages answers: id → its index in toolCalls
  let open: { at: number; calls: Map<string, number>; answered: Set<string> } | undefined;
  const closeOpen = () => {
    if (!open) return;
    for (const [id, k] of open.calls)
      if (!open.answered.has(id))
        issues.push({
          path: [open.at, 'toolCalls', k],
          message:
            `tool call ${JSON.stringify(id)} has no result: the tool messages right after this message answer each of its calls ` +
            '(providers refuse a call left unanswered)',
        });
    open = undefined;
  };
  for (const [i, m] of messages.entries()) {
    if (m.role !== 'tool') closeOpen();
    if (m.role !== 'assistant' && m.toolCalls !== undefined)
      issues.push({ path: [i, 'toolCalls'], message: `a ${m.role} message carries no tool calls (an assistant message does)` });
    if (m.role !== 'tool' && m.toolCallId !== undefined)
      issues.push({ path: [i, 'toolCallId'], message: `a ${m.role} message is not a tool result (a tool message is)` });
    if (m.role === 'assistant' && m.toolCalls && m.toolCalls.length > 0) {
      const calls = new Map<string, number>();
      for (const [k, c] of m.toolCalls.entries()) {
        if (calls.has(c.id))
          issues.push({ path: [i, 'toolCalls', k, 'id'], message: `two calls of this message have the id ${JSON.stringify(c.id)}` });
        else calls.set(c.id, k);
      }
      open = { at: i, calls, answered: new Set() };
    } else if (m.role === 'tool') {
      const id = m.toolCallId;
      const at: HistoryIssue['path'] = [i, 'toolCallId'];
      if (id === undefined || id === '') issues.push({ path: at, message: 'a tool message names the call it answers (toolCallId)' });
      else if (!open?.calls.has(id))
        issues.push({
          path: at,
          message:
            'answers no call of the assistant message its results follow ' +
            `(a tool message comes right after the assistant message that made call ${JSON.stringify(id)})`,
        });
      else if (open.answered.has(id)) issues.push({ path: at, message: `answers call ${JSON.stringify(id)} a second time` });
      else open.answered.add(id);
    }
  }
  closeOpen();
  return issues;
}

/**
 * A message history an app hands in (bootstrap messages, a checkpoint's messages): InputMessages
 * whose tool calls and results pair up (toolPairingIssues), so that no later model request is
 * refused for it.
 */
export const InputHistory = z.array(InputMessage).superRefine((messages, ctx) => {
  for (const issue of toolPairingIssues(messages))
    ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message, input: messages });
});

/**
 * A message a prompt or an input carries: logged as a `user/message`, so only a user's message
 * (no tool calls, no tool result), and all JSON.
 */
export const UserMessage = z.strictObject({
  role: z.literal('user', 'a prompt or input message must have role "user" (it is logged as a user/message)'),
  /** Text, or parts: images and files as bytes are stored as blobs before the message is logged. */
  content: InputContent,
  name: z.string().optional(),
  providerData: JsonProviderData.optional(),
  // a Message-typed object may carry these keys unset
  toolCalls: z.undefined('a user message carries no tool calls').optional(),
  toolCallId: z.undefined('a user message is not a tool result').optional(),
  isError: z.undefined('a user message is not a tool result').optional(),
});

/** Token usage of one model call (or a sum of several). */
export const Usage = z.object({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  cachedInputTokens: z.number().int().nonnegative().optional(),
  /** Output tokens spent on reasoning, when the provider reports them (already counted in `outputTokens`). */
  reasoningTokens: z.number().int().nonnegative().optional(),
});
export type Usage = z.infer<typeof Usage>;

export const FinishReason = z.enum(['stop', 'tool_calls', 'length', 'content_filter', 'refusal', 'error']);
export type FinishReason = z.infer<typeof FinishReason>;

/** Adds two usages (missing counts are 0); `reasoningTokens` is present when either side has it. */
export function addUsage(a: Usage, b: Usage | undefined): Usage {
  if (!b) return a;
  const reasoning = a.reasoningTokens !== undefined || b.reasoningTokens !== undefined;
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cachedInputTokens: (a.cachedInputTokens ?? 0) + (b.cachedInputTokens ?? 0),
    ...(reasoning ? { reasoningTokens: (a.reasoningTokens ?? 0) + (b.reasoningTokens ?? 0) } : {}),
  };
}

export const zeroUsage = (): Usage => ({ inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 });
