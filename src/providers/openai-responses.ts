import { randomUUID } from 'node:crypto';
import type OpenAI from 'openai';
import { z } from 'zod';
import { ProviderError } from '../contracts/errors.js';
import type { FinishReason, ToolCall, Usage } from '../contracts/message.js';
import type { ModelProvider, ModelRequest, ModelResponse, ModelStreamEvent } from '../contracts/model.js';
import { parseInput } from '../contracts/validate.js';
import { toResponsesInput, toResponsesTools } from './openai-responses-input.js';
import { clientSecrets, redactSecrets } from './redact.js';
import { openaiRateHeaders } from './rate-headers.js';
import { OPENAI_CONTENT } from './content-support.js';
import { withExtraBody } from './extra-body.js';
import {
  asRecord,
  classifyStreamErrorType,
  sdkErrorClasses,
  sdkFromEnv,
  streamResponse,
  throwIfAborted,
  type StreamFold,
} from './shared.js';

type Body = OpenAI.Responses.ResponseCreateParamsStreaming;
type Event = OpenAI.Responses.ResponseStreamEvent;
type Item = Record<string, unknown> & { type: string };

/**
 * The part of an `openai` client (`new OpenAI()`) `openaiResponsesModel` calls. Structural, so an
 * app's types need the `openai` package only if it uses this adapter (docs/packaging.md).
 * @example
 * const client: OpenAIResponsesClient = new OpenAI({ apiKey })
 */
export interface OpenAIResponsesClient {
  responses: {
    create(
      body: { model?: string; input?: string | readonly unknown[]; stream: true },
      options: { signal?: AbortSignal; maxRetries?: number },
    ): PromiseLike<AsyncIterable<unknown>>;
  };
}

const isClient = (c: unknown): boolean => typeof (c as { responses?: { create?: unknown } } | null)?.responses?.create === 'function';

/**
 * Whether a model id names an OpenAI reasoning model (whose reasoning items are asked for encrypted).
 * @example
 * isReasoningModel('o4-mini') // true; isReasoningModel('gpt-4.1-mini') // false
 * @internal
 */
export const isReasoningModel = (model: string): boolean => /^(o\d|gpt-5(?!-chat)|codex-)/.test(model);

/**
 * Options of `openaiResponsesModel`, validated at the call (a bad option throws `ValidationError`).
 * @example
 * openaiResponsesModel({ client: new OpenAI(), model: 'o4-mini', reasoning: { effort: 'low', summary: 'auto' } })
 */
export const OpenAIResponsesModelOptions = z.strictObject({
  /** An `openai` SDK client (`new OpenAI({ apiKey, baseURL })`); its own retries are turned off per request. */
  client: z.custom<OpenAIResponsesClient>(isClient, { message: 'expected an OpenAI client (new OpenAI({ apiKey }))' }),
  model: z.string().min(1),
  temperature: z.number().min(0).max(2).optional(),
  /** `max_output_tokens` of every call; the run's `maxOutputTokens` lowers it further. */
  maxTokens: z.number().int().positive().optional(),
  /** Role for system messages: `developer` for reasoning models. */
  systemRole: z.enum(['system', 'developer']).default('system'),
  /** Sent as `reasoning`, e.g. `{ effort: 'low', summary: 'auto' }` (a summary streams as `thinking_delta`). */
  reasoning: z
    .strictObject({
      /** `none`, `minimal`, `low`, `medium`, `high`, … as the model takes it. */
      effort: z.string().min(1).optional(),
      summary: z.enum(['auto', 'concise', 'detailed']).optional(),
    })
    .optional(),
  /**
   * Ask for `include: ['reasoning.encrypted_content']` (with `store: false`), so the reasoning items
   * are kept in the log and sent back on the next step. Default: on for a reasoning model (`reasoning`
   * given, or a model id `o1`…`o9…`, `gpt-5…` but `gpt-5-chat…`, `codex-…`), off otherwise — the API
   * refuses it for other models ("Encrypted content is not supported with this model").
   */
  encryptedReasoning: z.boolean().optional(),
  /** Extra body fields merged last (e.g. `parallel_tool_calls`, `tool_choice`, `metadata`); `stream` stays on. */
  extraBody: z.record(z.string(), z.unknown()).optional(),
});
export type OpenAIResponsesModelOptions = z.input<typeof OpenAIResponsesModelOptions>;

/**
 * The `providerData.openaiResponses` an assistant message gets from `openaiResponsesModel`.
 * @example
 * const reasoning = (res.message.providerData?.openaiResponses as OpenAIResponsesProviderData | undefined)?.output
 */
export interface OpenAIResponsesProviderData {
  id?: string;
  model?: string;
  /** The response's `status` (`completed`, `incomplete`) and, when incomplete, why. */
  status?: string;
  incompleteReason?: string;
  /** Refusal text. */
  refusal?: string;
  /**
   * Every output item in order, as the response returned it (reasoning items with their
   * `encrypted_content`, the message, the `function_call`s): sent back as the assistant message's
   * input items while they still match the message.
   */
  output?: Item[];
}

/** Token usage of a response: the whole input (cached part included) and the whole output (reasoning included). */
function usageOf(raw: unknown): Usage | undefined {
  const u = asRecord(raw);
  if (!u) return undefined;
  const count = (v: unknown) => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined);
  const cached = count(asRecord(u.input_tokens_details)?.cached_tokens);
  const reasoning = count(asRecord(u.output_tokens_details)?.reasoning_tokens);
  const input = count(u.input_tokens);
  const output = count(u.output_tokens);
  // no counts, no usage: the call then counts at its reservation, never at zero
  if (input === undefined || output === undefined) return undefined;
  return {
    inputTokens: input,
    outputTokens: output,
    ...(cached !== undefined ? { cachedInputTokens: cached } : {}),
    ...(reasoning !== undefined ? { reasoningTokens: reasoning } : {}),
  };
}

/**
 * A failed response (`response.failed`) or an `error` event: a ProviderError classified by its code.
 * @example
 * streamFailure({ code: 'rate_limit_exceeded', message: 'Slow down' }, true, secrets)
 */
function streamFailure(raw: unknown, partialOutput: boolean, secrets: readonly string[]): ProviderError {
  const e = asRecord(raw) ?? {};
  const code = typeof e.code === 'string' ? e.code : '';
  const message = typeof e.message === 'string' ? e.message : 'the response failed';
  const c = classifyStreamErrorType(code);
  // the message goes to the log: the client's key and quoted header values are redacted (redact.ts)
  return new ProviderError(redactSecrets(`openai-responses: error in stream: ${message}${code ? ` (${code})` : ''}`, secrets), {
    retryable: c.retryable,
    code: c.code,
    partialOutput,
  });
}

/**
 * Maps a response's end: tool calls, a refusal or an incomplete reason.
 * @example
 * mapResponsesFinish('max_output_tokens', false, false) // 'length'
 * @internal
 */
export function mapResponsesFinish(incompleteReason: string | undefined, hasToolCalls: boolean, refused: boolean): FinishReason {
  if (refused) return 'refusal';
  if (incompleteReason === 'max_output_tokens') return 'length';
  if (incompleteReason === 'content_filter') return 'content_filter';
  return hasToolCalls ? 'tool_calls' : 'stop';
}

interface Call {
  ordinal: number;
  id: string;
  name: string;
  args: string;
}

/** Folds Responses stream events into one response, emitting deltas as they arrive. */
function accumulator(emit: (e: ModelStreamEvent) => void, secrets: readonly string[]): StreamFold<Event> {
  const st = { text: '', refusal: '', emitted: false, id: undefined as string | undefined, model: undefined as string | undefined };
  const out = (e: ModelStreamEvent) => {
    st.emitted = true;
    emit(e);
  };
  const calls = new Map<number, Call>(); // by output_index
  const items = new Map<number, Item>(); // output_item.done, by output_index
  let final: { status: string; incompleteReason?: string; usage?: Usage; output?: Item[] } | undefined;
  const callAt = (index: number, item?: Record<string, unknown>): Call => {
    let c = calls.get(index);
    if (!c) {
      c = { ordinal: calls.size, id: '', name: '', args: '' };
      calls.set(index, c);
    }
    if (item) {
      if (typeof item.call_id === 'string') c.id = item.call_id;
      if (typeof item.name === 'string') c.name = item.name;
    }
    return c;
  };
  return {
    get finished() {
      return final !== undefined;
    },
    /** `response.completed` / `response.incomplete` carries the whole response: nothing is missing. */
    get complete() {
      return final !== undefined;
    },
    push(event: Event) {
      const ev = event as unknown as Record<string, any>;
      switch (ev.type) {
        case 'response.created':
        case 'response.in_progress':
          st.id ??= ev.response?.id;
          st.model ??= ev.response?.model;
          return;
        case 'response.output_item.added':
          if (ev.item?.type === 'function_call') {
            const c = callAt(ev.output_index, ev.item);
            out({ type: 'toolcall_delta', index: c.ordinal, callId: c.id, name: c.name, argumentsDelta: ev.item.arguments ?? '' });
            c.args += ev.item.arguments ?? '';
          }
          return;
        case 'response.output_text.delta':
          st.text += ev.delta;
          if (ev.delta) out({ type: 'text_delta', text: ev.delta });
          return;
        case 'response.refusal.delta':
          st.refusal += ev.delta;
          return;
        case 'response.reasoning_summary_text.delta':
        case 'response.reasoning_text.delta':
          if (ev.delta) out({ type: 'thinking_delta', text: ev.delta });
          return;
        case 'response.function_call_arguments.delta': {
          const c = callAt(ev.output_index);
          c.args += ev.delta;
          out({ type: 'toolcall_delta', index: c.ordinal, argumentsDelta: ev.delta });
          return;
        }
        case 'response.function_call_arguments.done':
          if (typeof ev.arguments === 'string') callAt(ev.output_index).args = ev.arguments;
          return;
        case 'response.output_item.done':
          if (asRecord(ev.item) && typeof ev.item.type === 'string') items.set(ev.output_index, ev.item as Item);
          if (ev.item?.type === 'function_call') {
            const c = callAt(ev.output_index, ev.item);
            if (typeof ev.item.arguments === 'string') c.args = ev.item.arguments;
          }
          return;
        case 'response.completed':
        case 'response.incomplete': {
          const r = asRecord(ev.response) ?? {};
          st.id = typeof r.id === 'string' ? r.id : st.id;
          st.model = typeof r.model === 'string' ? r.model : st.model;
          const reason = asRecord(r.incomplete_details)?.reason;
          final = {
            status: typeof r.status === 'string' ? r.status : ev.type.slice('response.'.length),
            ...(typeof reason === 'string' ? { incompleteReason: reason } : {}),
            usage: usageOf(r.usage),
            ...(Array.isArray(r.output) && r.output.length ? { output: r.output as Item[] } : {}),
          };
          return;
        }
        case 'response.failed':
          throw streamFailure(asRecord(ev.response)?.error, st.emitted, secrets);
        case 'error':
          throw streamFailure(ev, st.emitted, secrets);
      }
    },
    result(): ModelResponse {
      const f = final!;
      // the completed response's output is whole (encrypted reasoning included); the done items otherwise
      const output = f.output ?? [...items.entries()].sort(([a], [b]) => a - b).map(([, i]) => i);
      const toolCalls: ToolCall[] = [...calls.entries()]
        .sort(([a], [b]) => a - b)
        .map(([, c]) => ({ id: c.id || `call_${randomUUID()}`, name: c.name, arguments: c.args }));
      const data: OpenAIResponsesProviderData = { id: st.id, model: st.model, status: f.status, output };
      if (f.incompleteReason) data.incompleteReason = f.incompleteReason;
      if (st.refusal) data.refusal = st.refusal;
      const message = {
        role: 'assistant' as const,
        content: st.text,
        ...(toolCalls.length ? { toolCalls } : {}),
        providerData: { openaiResponses: JSON.parse(JSON.stringify(data)) as Record<string, unknown> },
      };
      const finishReason = mapResponsesFinish(f.incompleteReason, toolCalls.length > 0, st.refusal !== '');
      return { message, finishReason, ...(f.usage ? { usage: f.usage } : {}), ...(st.refusal ? { refusal: st.refusal } : {}) };
    },
  };
}

/**
 * A `ModelProvider` on the OpenAI Responses API (`client.responses.create`, streaming), stateless:
 * `store: false`, and with `include: ['reasoning.encrypted_content']` the reasoning items are kept
 * in the assistant message's `providerData.openaiResponses.output` and sent back, in order, on the
 * next step (also after a recovery). Text, reasoning-summary and function-call argument deltas go
 * to `onEvent`; failures become `ProviderError`, an abort `CancelledError`; the SDK's own retries
 * are off (`maxRetries: 0`).
 *
 * Contract: `call`'s `onEvent` is called synchronously, in stream order, once per delta; if it
 * throws, the stream is closed and `call` rejects with that same error (not a `ProviderError`).
 * @example
 * import OpenAI from 'openai'
 * const model = openaiResponsesModel({ client: new OpenAI(), model: 'o4-mini', reasoning: { effort: 'low', summary: 'auto' } })
 */
export function openaiResponsesModel(options: OpenAIResponsesModelOptions): ModelProvider {
  const o = parseInput(OpenAIResponsesModelOptions, options, 'openaiResponsesModel');
  const classes = sdkErrorClasses(o.client);
  const secrets = clientSecrets(o.client);
  const encrypted = o.encryptedReasoning ?? (o.reasoning !== undefined || isReasoningModel(o.model));
  return {
    modelId: o.model,
    providerName: 'openai',
    structuredOutput: 'native',
    contentSupport: OPENAI_CONTENT,
    ...(o.maxTokens !== undefined ? { maxOutputTokens: o.maxTokens } : {}),
    async call(request: ModelRequest, onEvent: (event: ModelStreamEvent) => void): Promise<ModelResponse> {
      throwIfAborted(request.signal, 'openai-responses');
      const cap = [o.maxTokens, request.maxOutputTokens].filter((n): n is number => n !== undefined);
      const body = {
        ...withExtraBody(
          {
            model: o.model,
            input: toResponsesInput(request.messages, o.systemRole),
            ...(request.tools.length ? { tools: toResponsesTools(request.tools) } : {}),
            ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
            ...(cap.length ? { max_output_tokens: Math.min(...cap) } : {}),
            ...(o.reasoning ? { reasoning: o.reasoning } : {}),
            // the run's output schema: strict where every object is closed and fully required
            ...(request.output
              ? {
                  text: {
                    format: {
                      type: 'json_schema',
                      name: request.output.name,
                      schema: request.output.schema,
                      strict: request.output.strict,
                    },
                  },
                }
              : {}),
            store: false,
            ...(encrypted ? { include: ['reasoning.encrypted_content'] } : {}),
          },
          o.extraBody,
          { text: ['format'] },
        ),
        stream: true,
      } as Body;
      return streamResponse({
        provider: 'openai-responses',
        signal: request.signal,
        onEvent,
        classes,
        secrets,
        fold: (emit) => accumulator(emit, secrets),
        open: () => o.client.responses.create(body, { signal: request.signal, maxRetries: 0 }) as PromiseLike<AsyncIterable<Event>>,
        rateHeaders: (h) => openaiRateHeaders(h),
        unfinished: 'the stream ended before response.completed',
      });
    },
  };
}

/**
 * `openaiResponsesModel` with a client built from `OPENAI_API_KEY` and `OPENAI_BASE_URL`
 * (optional); imports the optional `openai` package on demand.
 * @example
 * const model = await openaiResponsesModelFromEnv({ model: 'gpt-5-mini' })
 */
export async function openaiResponsesModelFromEnv(options: Omit<OpenAIResponsesModelOptions, 'client'>): Promise<ModelProvider> {
  const { mod, apiKey, baseURL } = await sdkFromEnv('openaiResponsesModelFromEnv', 'OPENAI', 'openai', () => import('openai'));
  const client = new mod.default({ apiKey, baseURL, maxRetries: 0 });
  return openaiResponsesModel({ ...options, client });
}
