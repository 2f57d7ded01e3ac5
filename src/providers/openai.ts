import { randomUUID } from 'node:crypto';
import type OpenAI from 'openai';
import { z } from 'zod';
import { ProviderError } from '../contracts/errors.js';
import type { FinishReason, ModelMessage, ToolCall, Usage } from '../contracts/message.js';
import type { ModelProvider, ModelRequest, ModelResponse, ModelStreamEvent } from '../contracts/model.js';
import type { ToolSpec } from '../contracts/tools.js';
import { parseInput } from '../contracts/validate.js';
import { clientSecrets } from './redact.js';
import { OPENAI_CONTENT, textOnlyContent } from './content-support.js';
import { openaiUserParts, toolPartsMessage, toolText } from './openai-content.js';
import { openaiRateHeaders } from './rate-headers.js';
import { asRecord, sdkErrorClasses, sdkFromEnv, streamResponse, throwIfAborted, type StreamFold } from './shared.js';
import { withExtraBody } from './extra-body.js';

type Body = OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming;
type Param = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk;

/**
 * The part of an `openai` client (`new OpenAI()`) the adapter calls. Structural, so an app's types
 * need the `openai` package only if it uses this adapter (docs/packaging.md).
 * @example
 * const client: OpenAIClient = new OpenAI({ apiKey })
 */
export interface OpenAIClient {
  chat: {
    completions: {
      create(
        body: { model: string; messages: readonly unknown[]; stream: true },
        options: { signal?: AbortSignal; maxRetries?: number },
      ): PromiseLike<AsyncIterable<unknown>>;
    };
  };
}

const isClient = (c: unknown): boolean =>
  typeof (c as { chat?: { completions?: { create?: unknown } } } | null)?.chat?.completions?.create === 'function';

/**
 * Options of `openaiModel`, validated at the call (a bad option throws `ValidationError`).
 * @example
 * openaiModel({ client: new OpenAI(), model: 'o4-mini', systemRole: 'developer', extraBody: { reasoning_effort: 'low' } })
 */
export const OpenAIModelOptions = z.strictObject({
  /** An `openai` SDK client (`new OpenAI({ apiKey, baseURL })`); its own retries are turned off per request. */
  client: z.custom<OpenAIClient>(isClient, { message: 'expected an OpenAI client (new OpenAI({ apiKey }))' }),
  model: z.string().min(1),
  temperature: z.number().min(0).max(2).optional(),
  /** Output cap for every call; the run's `maxOutputTokens` lowers it further. */
  maxTokens: z.number().int().positive().optional(),
  /** Which body field carries the cap: `max_completion_tokens` (OpenAI) or `max_tokens` (older compatible servers). */
  maxTokensParam: z.enum(['max_completion_tokens', 'max_tokens']).default('max_completion_tokens'),
  /** Role for system messages: `developer` for o-series reasoning models. */
  systemRole: z.enum(['system', 'developer']).default('system'),
  /** Extra body fields merged last (e.g. `reasoning_effort`, `parallel_tool_calls`, `seed`); `stream` stays on. */
  extraBody: z.record(z.string(), z.unknown()).optional(),
});
export type OpenAIModelOptions = z.input<typeof OpenAIModelOptions>;

/**
 * The `providerData.openai` an assistant message gets from this adapter.
 * @example
 * const refusal = (res.message.providerData?.openai as OpenAIProviderData | undefined)?.refusal
 */
export interface OpenAIProviderData {
  id?: string;
  model?: string;
  /** The raw `finish_reason`. */
  finishReason?: string;
  /** Refusal text; sent back as the assistant message's `refusal` when the message is replayed. */
  refusal?: string;
  /** Reasoning text streamed by compatible servers (`reasoning_content` / `reasoning`); not sent back. */
  reasoning?: string;
}

/**
 * Maps actorloop messages to Chat Completions messages (system, user, assistant + tool_calls, tool).
 * @example
 * toOpenAIMessages([{ role: 'tool', toolCallId: 'call_1', content: 'sunny' }])
 * // [{ role: 'tool', tool_call_id: 'call_1', content: 'sunny' }]
 * @internal SDK-typed; not in the published declarations
 */
export function toOpenAIMessages(messages: readonly ModelMessage[], systemRole: 'system' | 'developer' = 'system'): Param[] {
  const out: Param[] = [];
  // a tool result's images and files: in a user message after the batch's tool messages (openai-content.ts)
  let batch: ModelMessage[] = [];
  const endBatch = () => {
    const parts = batch.length > 0 ? toolPartsMessage(batch) : undefined;
    if (parts) out.push(parts);
    batch = [];
  };
  for (const m of messages) {
    if (m.role !== 'tool') endBatch();
    else batch.push(m);
    out.push(openAIMessage(m, systemRole));
  }
  endBatch();
  return out;
}

function openAIMessage(m: ModelMessage, systemRole: 'system' | 'developer'): Param {
  switch (m.role) {
    case 'system':
      return { role: systemRole, content: textOnlyContent('openai', m.content, 'system') };
    case 'user':
      return {
        role: 'user',
        content: typeof m.content === 'string' ? m.content : openaiUserParts(m.content),
        ...(m.name ? { name: m.name } : {}),
      };
    case 'tool':
      if (!m.toolCallId) throw new ProviderError('openai: a tool message has no toolCallId', { retryable: false, code: 'bad_request' });
      return { role: 'tool', tool_call_id: m.toolCallId, content: toolText(m) };
    case 'assistant': {
      const calls = m.toolCalls ?? [];
      const refusal = asRecord(m.providerData?.openai)?.refusal;
      const text = textOnlyContent('openai', m.content, 'assistant');
      return {
        role: 'assistant',
        content: text === '' && (calls.length > 0 || typeof refusal === 'string') ? null : text,
        ...(calls.length
          ? {
              tool_calls: calls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
            }
          : {}),
        ...(typeof refusal === 'string' ? { refusal } : {}),
        ...(m.name ? { name: m.name } : {}),
      };
    }
  }
}

/**
 * Maps tool specs to `{ type: 'function', function: { name, description, parameters } }`.
 * @example
 * toOpenAITools([{ name: 'add', description: 'Adds', parameters: { type: 'object' } }])
 * @internal SDK-typed; not in the published declarations
 */
export const toOpenAITools = (tools: readonly ToolSpec[]) =>
  tools.map((t) => ({ type: 'function' as const, function: { name: t.name, description: t.description, parameters: t.parameters } }));

/**
 * Maps `finish_reason`; a refusal wins, and `stop` with tool calls (some compatible servers) is `tool_calls`.
 * @example
 * mapOpenAIFinish('length', true, false) // 'length'
 * @internal SDK-typed; not in the published declarations
 */
export function mapOpenAIFinish(raw: string, hasToolCalls: boolean, refused: boolean): FinishReason {
  if (refused) return 'refusal';
  if (raw === 'length') return 'length';
  if (raw === 'content_filter') return 'content_filter';
  if (raw === 'tool_calls' || raw === 'function_call' || hasToolCalls) return 'tool_calls';
  return 'stop';
}

interface Slot {
  ordinal: number;
  id: string;
  name: string;
  args: string;
}

/** Folds streamed chunks into one response, emitting deltas as they arrive. */
function accumulator(emit: (e: ModelStreamEvent) => void): StreamFold<Chunk> {
  const st = { text: '', refusal: '', reasoning: '', id: undefined as string | undefined, model: undefined as string | undefined };
  let finish: string | undefined;
  let usage: Usage | undefined;
  let usageChunk = false; // the usage chunk arrived (its counts may be missing)
  const slots = new Map<number, Slot>(); // the call being streamed at each wire index
  const calls: Slot[] = [];
  return {
    get finished() {
      return finish !== undefined;
    },
    /** The finish_reason and the usage chunk (always asked for) have both arrived: nothing is missing but [DONE]. */
    get complete() {
      return finish !== undefined && usageChunk;
    },
    push(chunk: Chunk) {
      st.id ??= chunk.id;
      st.model ??= chunk.model;
      if (chunk.usage) {
        usageChunk = true;
        // OpenAI-compatible servers send null for counts they do not keep (LiteLLM: cached_tokens)
        const count = (v: unknown) => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined);
        const cached = count(chunk.usage.prompt_tokens_details?.cached_tokens);
        // o-series models: the part of completion_tokens spent reasoning (already in outputTokens)
        const reasoning = count(chunk.usage.completion_tokens_details?.reasoning_tokens);
        const input = count(chunk.usage.prompt_tokens);
        const output = count(chunk.usage.completion_tokens);
        // no counts, no usage: the call then counts at its reservation, never at zero
        if (input !== undefined && output !== undefined)
          usage = {
            inputTokens: input,
            outputTokens: output,
            ...(cached !== undefined ? { cachedInputTokens: cached } : {}),
            ...(reasoning !== undefined ? { reasoningTokens: reasoning } : {}),
          };
      }
      const choice = chunk.choices?.find((c) => c.index === 0);
      if (!choice) return;
      const d = choice.delta ?? {};
      if (d.content) {
        st.text += d.content;
        emit({ type: 'text_delta', text: d.content });
      }
      // an audio answer (modalities ['text', 'audio']) carries its text as the audio's transcript
      const transcript = (d as { audio?: { transcript?: unknown } }).audio?.transcript;
      if (typeof transcript === 'string' && transcript) {
        st.text += transcript;
        emit({ type: 'text_delta', text: transcript });
      }
      if (d.refusal) st.refusal += d.refusal;
      const extra = d as Record<string, unknown>;
      const reasoning =
        typeof extra.reasoning_content === 'string' ? extra.reasoning_content : typeof extra.reasoning === 'string' ? extra.reasoning : '';
      if (reasoning) {
        st.reasoning += reasoning;
        emit({ type: 'thinking_delta', text: reasoning });
      }
      for (const tc of d.tool_calls ?? []) {
        // keyed by the wire index; a compatible server that omits it (Gemini streams each call
        // whole) or repeats one index for several calls starts a new call with each new id
        const k = typeof tc.index === 'number' ? tc.index : -1;
        let s = slots.get(k);
        if (!s || (tc.id && s.id && tc.id !== s.id)) {
          s = { ordinal: calls.length, id: '', name: '', args: '' };
          calls.push(s);
          slots.set(k, s);
        }
        if (tc.id) s.id = tc.id;
        const name = tc.function?.name;
        if (name && name !== s.name) s.name += name;
        const args = tc.function?.arguments ?? '';
        s.args += args;
        emit({
          type: 'toolcall_delta',
          index: s.ordinal,
          ...(tc.id ? { callId: tc.id } : {}),
          ...(name ? { name } : {}),
          argumentsDelta: args,
        });
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    },
    result(): ModelResponse {
      const toolCalls: ToolCall[] = [...calls]
        .sort((a, b) => a.ordinal - b.ordinal)
        .map((s) => ({ id: s.id || `call_${randomUUID()}`, name: s.name, arguments: s.args }));
      const data: OpenAIProviderData = { id: st.id, model: st.model, finishReason: finish };
      if (st.refusal) data.refusal = st.refusal;
      if (st.reasoning) data.reasoning = st.reasoning;
      const message = {
        role: 'assistant' as const,
        content: st.text,
        ...(toolCalls.length ? { toolCalls } : {}),
        providerData: { openai: JSON.parse(JSON.stringify(data)) as Record<string, unknown> },
      };
      const finishReason = mapOpenAIFinish(finish ?? 'stop', toolCalls.length > 0, st.refusal !== '');
      return { message, finishReason, ...(usage ? { usage } : {}), ...(st.refusal ? { refusal: st.refusal } : {}) };
    },
  };
}

/**
 * A `ModelProvider` on the OpenAI Chat Completions API (or any compatible server), streaming with
 * `stream_options.include_usage`. Text, reasoning (`reasoning_content`) and tool-call deltas go to
 * `onEvent`; parallel tool calls are assembled by `index`; failures become `ProviderError`, an
 * abort `CancelledError`. The SDK's own retries are off (`maxRetries: 0`).
 *
 * Contract: `call`'s `onEvent` is called synchronously, in stream order, once per delta; if it
 * throws, the stream is closed and `call` rejects with that same error (not a `ProviderError`).
 * @example
 * import OpenAI from 'openai'
 * const model = openaiModel({ client: new OpenAI(), model: 'gpt-4.1-mini', temperature: 0 })
 * const res = await model.call({ messages, tools: [], signal }, (e) => e.type === 'text_delta' && process.stdout.write(e.text))
 */
export function openaiModel(options: OpenAIModelOptions): ModelProvider {
  const o = parseInput(OpenAIModelOptions, options, 'openaiModel');
  const classes = sdkErrorClasses(o.client);
  const secrets = clientSecrets(o.client);
  return {
    modelId: o.model,
    providerName: 'openai',
    structuredOutput: 'native',
    contentSupport: OPENAI_CONTENT,
    ...(o.maxTokens !== undefined ? { maxOutputTokens: o.maxTokens } : {}),
    async call(request: ModelRequest, onEvent: (event: ModelStreamEvent) => void): Promise<ModelResponse> {
      throwIfAborted(request.signal, 'openai');
      const cap = [o.maxTokens, request.maxOutputTokens].filter((n): n is number => n !== undefined);
      const body = {
        ...withExtraBody(
          {
            model: o.model,
            messages: toOpenAIMessages(request.messages, o.systemRole),
            ...(request.tools.length ? { tools: toOpenAITools(request.tools) } : {}),
            ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
            ...(cap.length ? { [o.maxTokensParam]: Math.min(...cap) } : {}),
            // the run's output schema: strict where every object is closed and fully required
            ...(request.output
              ? {
                  response_format: {
                    type: 'json_schema',
                    json_schema: { name: request.output.name, schema: request.output.schema, strict: request.output.strict },
                  },
                }
              : {}),
            stream_options: { include_usage: true },
          },
          o.extraBody,
          { response_format: true },
        ),
        stream: true,
      } as Body;
      return streamResponse({
        provider: 'openai',
        signal: request.signal,
        onEvent,
        classes,
        secrets,
        fold: accumulator,
        open: () => o.client.chat.completions.create(body, { signal: request.signal, maxRetries: 0 }) as PromiseLike<AsyncIterable<Chunk>>,
        rateHeaders: (h) => openaiRateHeaders(h),
        unfinished: 'the stream ended before a finish_reason',
      });
    },
  };
}

/**
 * `openaiModel` with a client built from `OPENAI_API_KEY` and `OPENAI_BASE_URL` (optional);
 * imports the optional `openai` package on demand.
 * @example
 * const model = await openaiModelFromEnv({ model: 'gpt-4.1-mini' })
 */
export async function openaiModelFromEnv(options: Omit<OpenAIModelOptions, 'client'>): Promise<ModelProvider> {
  const { mod, apiKey, baseURL } = await sdkFromEnv('openaiModelFromEnv', 'OPENAI', 'openai', () => import('openai'));
  const client = new mod.default({ apiKey, baseURL, maxRetries: 0 });
  return openaiModel({ ...options, client });
}
