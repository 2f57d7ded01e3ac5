import type Anthropic from '@anthropic-ai/sdk';
import { ownRecord } from '../contracts/keyed.js';
import { z } from 'zod';
import type { FinishReason, ToolCall, Usage } from '../contracts/message.js';
import type { ModelProvider, ModelRequest, ModelResponse, ModelStreamEvent } from '../contracts/model.js';
import { parseInput } from '../contracts/validate.js';
import { clientSecrets } from './redact.js';
import { parseToolInput, toAnthropicMessages, toAnthropicTools } from './anthropic-messages.js';
import { anthropicRateHeaders } from './rate-headers.js';
import { asRecord, sdkErrorClasses, sdkFromEnv, streamResponse, throwIfAborted, type StreamFold } from './shared.js';
import { ANTHROPIC_CONTENT } from './content-support.js';
import { withExtraBody } from './extra-body.js';

type Body = Anthropic.Messages.MessageCreateParamsStreaming;
type Event = Anthropic.Messages.RawMessageStreamEvent;
type Block = Record<string, unknown> & { type: string };

/**
 * The part of an `@anthropic-ai/sdk` client (`new Anthropic()`) the adapter calls. Structural, so an
 * app's types need the SDK only if it uses this adapter (docs/packaging.md).
 * @example
 * const client: AnthropicClient = new Anthropic({ apiKey })
 */
export interface AnthropicClient {
  messages: {
    create(
      body: { model: string; max_tokens: number; messages: readonly unknown[]; stream: true },
      options: { signal?: AbortSignal; maxRetries?: number },
    ): PromiseLike<AsyncIterable<unknown>>;
  };
}

/**
 * Extended thinking as the Messages API takes it, e.g. `{ type: 'enabled', budget_tokens: 2048 }`
 * or `{ type: 'adaptive' }` (the SDK's `ThinkingConfigParam`, kept structural).
 * @example
 * const thinking: AnthropicThinking = { type: 'enabled', budget_tokens: 4096 }
 */
export type AnthropicThinking =
  | { type: 'enabled'; budget_tokens: number }
  | { type: 'disabled' }
  | { type: string; budget_tokens?: number };

const isClient = (c: unknown): boolean => typeof (c as { messages?: { create?: unknown } } | null)?.messages?.create === 'function';

/**
 * Options of `anthropicModel`, validated at the call (a bad option throws `ValidationError`).
 * @example
 * anthropicModel({
 *   client: new Anthropic(),
 *   model: 'claude-sonnet-4-5',
 *   maxTokens: 8192,
 *   thinking: { type: 'enabled', budget_tokens: 4096 },
 * })
 */
export const AnthropicModelOptions = z.strictObject({
  /** An `@anthropic-ai/sdk` client (`new Anthropic({ apiKey })`); its own retries are turned off per request. */
  client: z.custom<AnthropicClient>(isClient, { message: 'expected an Anthropic client (new Anthropic({ apiKey }))' }),
  model: z.string().min(1),
  /** `max_tokens` of every call (required by the API); the run's `maxOutputTokens` lowers it further. */
  maxTokens: z.number().int().positive().default(4096),
  /** Extended thinking, e.g. `{ type: 'enabled', budget_tokens: 2048 }` or `{ type: 'adaptive' }`; sent as `thinking`. */
  thinking: z.custom<AnthropicThinking>((v) => typeof asRecord(v)?.type === 'string', { message: 'expected { type: … }' }).optional(),
  /** Extra body fields merged last (e.g. `temperature`, `tool_choice`, `cache_control`, `metadata`); `stream` stays on. */
  extraBody: z.record(z.string(), z.unknown()).optional(),
});
export type AnthropicModelOptions = z.input<typeof AnthropicModelOptions>;

/**
 * The `providerData.anthropic` an assistant message gets from this adapter.
 * @example
 * const blocks = (res.message.providerData?.anthropic as AnthropicProviderData | undefined)?.content
 */
export interface AnthropicProviderData {
  id?: string;
  model?: string;
  /** The raw `stop_reason` (`end_turn`, `pause_turn`, `refusal`, …), `stop_sequence` and `stop_details`. */
  stopReason?: string | null;
  stopSequence?: string | null;
  stopDetails?: unknown;
  /** The raw usage counters, as the API reported them. */
  usage?: Record<string, unknown>;
  /**
   * Every content block in order, as streamed (thinking with its signature, redacted_thinking,
   * text with citations, tool_use with its parsed input, server-tool blocks). Present when the
   * message holds anything `content` and `toolCalls` cannot express; replayed verbatim.
   */
  content?: Block[];
}

/**
 * Maps `stop_reason`: end_turn/stop_sequence/pause_turn → stop, tool_use → tool_calls,
 * max_tokens/model_context_window_exceeded → length, refusal → refusal.
 * @example
 * mapAnthropicStop('max_tokens', true) // 'length'
 * @internal SDK-typed; not in the published declarations
 */
export function mapAnthropicStop(raw: string | null | undefined, hasToolCalls: boolean): FinishReason {
  switch (raw) {
    case 'tool_use':
      return 'tool_calls';
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'refusal':
      return 'refusal';
    case 'end_turn':
    case 'stop_sequence':
    case 'pause_turn':
      return 'stop';
    default:
      return hasToolCalls ? 'tool_calls' : 'stop';
  }
}

interface BlockState {
  raw: Block;
  json?: string;
  ordinal?: number;
}

/** Folds raw stream events into one response, emitting deltas as they arrive. */
function accumulator(emit: (e: ModelStreamEvent) => void): StreamFold<Event> {
  const blocks = new Map<number, BlockState>();
  const usage = ownRecord<unknown>(); // keys from the wire
  const meta: { id?: string; model?: string; stopReason?: string | null; stopSequence?: string | null; stopDetails?: unknown } = {};
  let tools = 0;
  let finished = false;
  const mergeUsage = (u: unknown) => {
    for (const [k, v] of Object.entries(asRecord(u) ?? {})) if (v != null) usage[k] = v;
  };
  return {
    get finished() {
      return finished;
    },
    /** message_stop has arrived: nothing is missing but the end of the stream. */
    get complete() {
      return finished;
    },
    push(event: Event) {
      const ev = event as unknown as Record<string, any>;
      switch (ev.type) {
        case 'message_start':
          meta.id = ev.message?.id;
          meta.model = ev.message?.model;
          mergeUsage(ev.message?.usage);
          return;
        case 'content_block_start': {
          const raw = { ...ev.content_block } as Block;
          const b: BlockState = { raw };
          blocks.set(ev.index, b);
          if ('input' in raw) b.json = '';
          if (raw.type === 'tool_use') {
            b.ordinal = tools++;
            emit({ type: 'toolcall_delta', index: b.ordinal, callId: String(raw.id), name: String(raw.name), argumentsDelta: '' });
          } else if (raw.type === 'text' && raw.text) emit({ type: 'text_delta', text: String(raw.text) });
          else if (raw.type === 'thinking' && raw.thinking) emit({ type: 'thinking_delta', text: String(raw.thinking) });
          return;
        }
        case 'content_block_delta': {
          const b = blocks.get(ev.index);
          const d = ev.delta ?? {};
          if (!b) return;
          if (d.type === 'text_delta') {
            b.raw.text = String(b.raw.text ?? '') + d.text;
            emit({ type: 'text_delta', text: d.text });
          } else if (d.type === 'thinking_delta') {
            b.raw.thinking = String(b.raw.thinking ?? '') + d.thinking;
            emit({ type: 'thinking_delta', text: d.thinking });
          } else if (d.type === 'signature_delta') b.raw.signature = d.signature;
          else if (d.type === 'citations_delta') b.raw.citations = [...((b.raw.citations as unknown[] | null) ?? []), d.citation];
          else if (d.type === 'input_json_delta' && b.json !== undefined) {
            b.json += d.partial_json;
            if (b.ordinal !== undefined) emit({ type: 'toolcall_delta', index: b.ordinal, argumentsDelta: d.partial_json });
          }
          return;
        }
        case 'content_block_stop': {
          const b = blocks.get(ev.index);
          if (b?.json) b.raw.input = parseToolInput(b.json);
          return;
        }
        case 'message_delta':
          meta.stopReason = ev.delta?.stop_reason ?? null;
          meta.stopSequence = ev.delta?.stop_sequence ?? null;
          if (ev.delta?.stop_details != null) meta.stopDetails = ev.delta.stop_details;
          mergeUsage(ev.usage);
          return;
        case 'message_stop':
          finished = true;
          return;
      }
    },
    result(): ModelResponse {
      const states = [...blocks.entries()].sort(([a], [b]) => a - b).map(([, s]) => s);
      const content = states
        .filter((s) => s.raw.type === 'text')
        .map((s) => String(s.raw.text ?? ''))
        .join('');
      // The streamed partial_json, verbatim; "{}" when the call streamed no input.
      const argumentsOf = (s: BlockState) =>
        s.json || (Object.keys(asRecord(s.raw.input) ?? {}).length ? JSON.stringify(s.raw.input) : '{}');
      const toolCalls: ToolCall[] = states
        .filter((s) => s.raw.type === 'tool_use')
        .map((s) => ({ id: String(s.raw.id), name: String(s.raw.name), arguments: argumentsOf(s) }));
      const special = states.some((s) => !['text', 'tool_use'].includes(s.raw.type) || (s.raw.type === 'text' && s.raw.citations != null));
      const data: AnthropicProviderData = {
        ...meta,
        usage: ownRecord(Object.entries(usage)),
        ...(special ? { content: states.map((s) => s.raw) } : {}),
      };
      const n = (k: string) => (typeof usage[k] === 'number' ? (usage[k] as number) : 0); // own: no prototype
      // no counts, no usage: the call then counts at its reservation, never at zero
      const reported = typeof usage.input_tokens === 'number' && typeof usage.output_tokens === 'number';
      const thinking = asRecord(usage.output_tokens_details)?.thinking_tokens; // part of output_tokens
      const u: Usage | undefined = reported
        ? {
            inputTokens: n('input_tokens') + n('cache_read_input_tokens') + n('cache_creation_input_tokens'),
            outputTokens: n('output_tokens'),
            cachedInputTokens: n('cache_read_input_tokens'),
            ...(Number.isInteger(thinking) && (thinking as number) >= 0 ? { reasoningTokens: thinking as number } : {}),
          }
        : undefined;
      const finishReason = mapAnthropicStop(meta.stopReason, toolCalls.length > 0);
      const message = {
        role: 'assistant' as const,
        content,
        ...(toolCalls.length ? { toolCalls } : {}),
        providerData: { anthropic: JSON.parse(JSON.stringify(data)) as Record<string, unknown> },
      };
      const explanation = asRecord(meta.stopDetails)?.explanation;
      const refusal =
        finishReason === 'refusal' ? content || (typeof explanation === 'string' ? explanation : 'the model refused to answer') : undefined;
      return { message, ...(u ? { usage: u } : {}), finishReason, ...(refusal !== undefined ? { refusal } : {}) };
    },
  };
}

/**
 * A `ModelProvider` on the Anthropic Messages API, streaming. Text, thinking and `input_json_delta`
 * deltas go to `onEvent`; tool calls are assembled per content block; thinking blocks (with their
 * signatures) are kept in `providerData.anthropic.content` and sent back verbatim when the message
 * is replayed. Failures become `ProviderError`, an abort `CancelledError`; the SDK's own retries
 * are off (`maxRetries: 0`).
 *
 * Contract: `call`'s `onEvent` is called synchronously, in stream order, once per delta; if it
 * throws, the stream is closed and `call` rejects with that same error (not a `ProviderError`).
 * @example
 * import Anthropic from '@anthropic-ai/sdk'
 * const model = anthropicModel({ client: new Anthropic(), model: 'claude-sonnet-4-5', maxTokens: 8192 })
 * const res = await model.call({ messages, tools: [], signal }, (e) => e.type === 'text_delta' && process.stdout.write(e.text))
 */
export function anthropicModel(options: AnthropicModelOptions): ModelProvider {
  const o = parseInput(AnthropicModelOptions, options, 'anthropicModel');
  const classes = sdkErrorClasses(o.client);
  const secrets = clientSecrets(o.client);
  return {
    modelId: o.model,
    providerName: 'anthropic',
    structuredOutput: 'native',
    contentSupport: ANTHROPIC_CONTENT,
    maxOutputTokens: o.maxTokens,
    async call(request: ModelRequest, onEvent: (event: ModelStreamEvent) => void): Promise<ModelResponse> {
      throwIfAborted(request.signal, 'anthropic');
      const { system, messages } = toAnthropicMessages(request.messages);
      const maxTokens = Math.min(o.maxTokens, request.maxOutputTokens ?? Infinity);
      const thinking = thinkingWithin(o.thinking, maxTokens);
      const body = {
        ...withExtraBody(
          {
            model: o.model,
            max_tokens: maxTokens,
            messages,
            ...(system !== undefined ? { system } : {}),
            ...(request.tools.length ? { tools: toAnthropicTools(request.tools) } : {}),
            ...(thinking ? { thinking } : {}),
            // the run's output schema: the API's own structured output (the answer's text is JSON of it; tools stay callable)
            ...(request.output ? { output_config: { format: { type: 'json_schema', schema: request.output.schema } } } : {}),
          },
          o.extraBody,
          { output_config: ['format'] },
        ),
        stream: true,
      } as Body;
      return streamResponse({
        provider: 'anthropic',
        signal: request.signal,
        onEvent,
        classes,
        secrets,
        fold: accumulator,
        open: () => o.client.messages.create(body, { signal: request.signal, maxRetries: 0 }) as PromiseLike<AsyncIterable<Event>>,
        rateHeaders: (h) => anthropicRateHeaders(h),
        unfinished: 'the stream ended before message_stop',
      });
    },
  };
}

/**
 * `anthropicModel` with a client built from `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL`
 * (optional); imports the optional `@anthropic-ai/sdk` package on demand.
 * @example
 * const model = await anthropicModelFromEnv({ model: 'claude-sonnet-4-5' })
 */
export async function anthropicModelFromEnv(options: Omit<AnthropicModelOptions, 'client'>): Promise<ModelProvider> {
  const { mod, apiKey, baseURL } = await sdkFromEnv(
    'anthropicModelFromEnv',
    'ANTHROPIC',
    '@anthropic-ai/sdk',
    () => import('@anthropic-ai/sdk'),
  );
  const client = new mod.default({ apiKey, baseURL, maxRetries: 0 });
  return anthropicModel({ ...options, client });
}

/**
 * The Messages API wants `max_tokens` above an enabled thinking budget (and a budget of at least
 * 1024): when the run's output budget lowers `max_tokens` that far, the thinking budget is lowered
 * with it, or thinking is left out of the call when not even 1024 tokens fit.
 */
function thinkingWithin<T>(thinking: T | undefined, maxTokens: number): T | undefined {
  const t = thinking as { type?: string; budget_tokens?: number } | undefined;
  if (!t || t.type !== 'enabled' || typeof t.budget_tokens !== 'number' || t.budget_tokens < maxTokens) return thinking;
  if (maxTokens - 1 < 1024) return undefined;
  return { ...t, budget_tokens: maxTokens - 1 } as T;
}
