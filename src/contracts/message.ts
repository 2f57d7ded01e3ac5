import { z } from 'zod';
import { InputContent, StoredContent, type Content } from './content.js';
import { JsonObject } from './json.js';

/**
 * Provider-specific data kept verbatim and sent back on the next request (e.g. thinking blocks):
 * a JSON object (a provider response whose data is not JSON is an `invalid_response`).
 */
export const ProviderData = JsonObject;
export type ProviderData = z.infer<typeof ProviderData>;

/** One tool call the model asked for. `arguments` is the raw JSON text, validated by the runtime. */
export const ToolCall = z.object({
  id: z.string().min(1),
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
  toolCallId: z.string().optional(),
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
