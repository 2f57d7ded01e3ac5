import { z } from 'zod';
import { FinishReason, Message, Usage, type ModelMessage } from './message.js';
import type { ToolSpec } from './tools.js';
import { ProviderRateLimits } from './provider-limits.js';

/**
 * What the run engine asks a model for. `messages` starts with the system message, if any; their
 * content parts are resolved (bytes as base64, docs/providers.md "Content parts").
 */
export interface ModelRequest {
  messages: readonly ModelMessage[];
  tools: readonly ToolSpec[];
  /** Upper bound for this call's output, when the run has one. */
  maxOutputTokens?: number;
  /**
   * The run's output schema (docs/typed-output.md): the final answer must be JSON of it. A
   * provider with a native structured-output mode (`structuredOutput: 'native'`) uses it; for
   * any other the runtime has joined an instruction with the schema to the system message.
   */
  output?: ModelRequestOutput;
  signal: AbortSignal;
}

/** A run's output schema as a model request carries it. */
export interface ModelRequestOutput {
  /** The schema's name (`^[a-zA-Z0-9_-]{1,64}$`, OpenAI's `json_schema.name`). */
  name: string;
  /** JSON Schema of the answer. */
  schema: Record<string, unknown>;
  /** Whether OpenAI's strict mode takes it (every object closed, every property required). */
  strict: boolean;
}

/**
 * The media types of image and file bytes a model takes (docs/providers.md, "Content parts"). An
 * image by URL is passed on as it is. The runtime refuses a prompt or input with any other media
 * type before it is logged, and turns such a tool result into an error result the model reads.
 * @example
 * const support: ContentSupport = { image: ['image/png', 'image/jpeg'], file: ['application/pdf'] }
 */
export const ContentSupport = z.strictObject({
  image: z.array(z.string().min(1)).readonly(),
  file: z.array(z.string().min(1)).readonly(),
});
export type ContentSupport = z.infer<typeof ContentSupport>;

/** Live output while a model call streams; only the whole message is logged. */
export type ModelStreamEvent =
  | { type: 'text_delta'; text: string }
  | { type: 'thinking_delta'; text: string }
  | { type: 'toolcall_delta'; index: number; callId?: string; name?: string; argumentsDelta: string };

/** One finished model call, mapped into the project's own shape. */
export interface ModelResponse {
  /** role `assistant`, text content; tool calls carry their raw JSON argument text. */
  message: Message & { content: string };
  usage?: Usage;
  finishReason: FinishReason;
  /** The refusal text, when the provider refused. */
  refusal?: string;
  /**
   * The provider's own rate limits, read from the response's headers (optional: `openaiModel`,
   * `openaiResponsesModel` and `anthropicModel` set it when the headers are there). The runtime's
   * `rateLimits` limiter reads it (docs/rate-limits.md).
   */
  providerLimits?: ProviderRateLimits;
}

/**
 * What a ModelProvider's `call` must resolve with: checked by the runtime on every call, so that a
 * custom provider's bad response fails its model call with a named ProviderError
 * (`invalid_response`), never deeper in the run.
 */
export const ModelResponseSchema = z.object({
  message: Message.extend({ role: z.literal('assistant'), content: z.string() }),
  usage: Usage.optional(),
  finishReason: FinishReason,
  refusal: z.string().optional(),
  providerLimits: ProviderRateLimits.optional(),
});

/**
 * A model behind one wire API.
 *
 * Contract: `call` resolves with the whole response, calling `onEvent` for live deltas as they
 * arrive. It throws `ProviderError` for every failure of the provider (never an untyped error),
 * and `CancelledError` when `request.signal` aborts. It never retries on its own: the runtime
 * owns every retry and logs each attempt.
 * @example
 * const res = await model.call({ messages, tools, signal }, (e) => e.type === 'text_delta' && write(e.text))
 * const mine: ModelProvider = { modelId: 'my-model', providerName: 'my_company', call: myCall }
 */
export interface ModelProvider {
  /** The model id, used in the execution-profile fingerprint and passed to `pricing`. */
  readonly modelId: string;
  /**
   * Who serves the model, as OpenTelemetry's GenAI conventions name it (`gen_ai.provider.name`
   * on model-call spans): `openai`, `anthropic`, `aws.bedrock`, `azure.ai.openai`, … Optional: a
   * provider without one gets no such attribute. `openaiModel` says `openai`, `anthropicModel`
   * `anthropic`, `scriptedModel` `actorloop.scripted`.
   */
  readonly providerName?: string;
  /**
   * `'native'`: the provider maps `request.output` to its API's own structured-output mode
   * (`openaiModel`, `anthropicModel`). Absent: the runtime asks for JSON in the system message
   * and parses the answer's text. Either way the runtime validates the answer with zod.
   */
  readonly structuredOutput?: 'native';
  /**
   * The most output tokens one call may ask for (the model's, or the adapter's `maxTokens`).
   * Optional: without it a call under a `maxCost` budget asks for at most `outputReserve`. The
   * runtime's output cap (from what the budgets leave) never exceeds it.
   */
  readonly maxOutputTokens?: number;
  /**
   * The media types of image and file bytes the model takes (`openaiModel`,
   * `openaiResponsesModel`, `anthropicModel` declare theirs). Optional: a provider without it is
   * handed every part.
   */
  readonly contentSupport?: ContentSupport;
  call(request: ModelRequest, onEvent: (event: ModelStreamEvent) => void): Promise<ModelResponse>;
}
