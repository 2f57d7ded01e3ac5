import { CancelledError, ProviderError, ValidationError } from '../contracts/errors.js';
import type { ModelResponse, ModelStreamEvent } from '../contracts/model.js';
import type { ProviderRateLimits } from '../contracts/rate-limits.js';
import type { HeadersLike } from './rate-headers.js';

/**
 * Helpers shared by the provider adapters: guarding the caller's `onEvent` listener, reading a
 * streaming call to its response, and loading an SDK from the environment (mapping SDK failures to
 * `ProviderError`: provider-errors.ts).
 */

export {
  classifyStatus,
  classifyStreamErrorType,
  sdkErrorClasses,
  toProviderError,
  type FailureContext,
  type SdkErrorClasses,
} from './provider-errors.js';
import { jsonAnswerError, toProviderError, type SdkErrorClasses } from './provider-errors.js';
export { asRecord } from './records.js';

/** A throw from the caller's `onEvent`, carried through the SDK iteration and rethrown unchanged. */
class ListenerFailure {
  constructor(readonly error: unknown) {}
}

/**
 * Wraps `onEvent` so that a throw from the listener stops the stream and is rethrown as it was,
 * not mistaken for a provider failure. `emitted` tells whether output has begun.
 * @example
 * const out = guardListener(onEvent); out.emit({ type: 'text_delta', text }); out.emitted // true
 */
export function guardListener(onEvent: (event: ModelStreamEvent) => void, signal?: AbortSignal) {
  const state = {
    emitted: false,
    emit(event: ModelStreamEvent) {
      if (signal?.aborted) return; // no delta after a cancel, even from the rest of a chunk
      state.emitted = true;
      try {
        onEvent(event);
      } catch (err) {
        throw new ListenerFailure(err);
      }
    },
    /** Returns the listener's own error when `e` came from it. */
    unwrap(e: unknown): { listenerError: unknown } | undefined {
      return e instanceof ListenerFailure ? { listenerError: e.error } : undefined;
    },
  };
  return state;
}

/**
 * How an adapter folds its SDK's stream items into one response. `finished`: the answer has
 * ended (Anthropic's `message_stop`, OpenAI's `finish_reason`); `complete`: nothing is missing
 * but the end of the stream itself, so a connection that drops now leaves a whole answer.
 */
export interface StreamFold<T> {
  push(item: T): void;
  readonly finished: boolean;
  readonly complete: boolean;
  result(): ModelResponse;
}

/**
 * One streaming model call, for `streamResponse`.
 * @example
 * const call: StreamCall<Chunk> = {
 *   provider: 'openai', signal, onEvent, classes, secrets, fold: accumulator,
 *   open: () => client.chat.completions.create(body, { signal }),
 *   unfinished: 'the stream ended before a finish_reason',
 * }
 */
export interface StreamCall<T> {
  provider: string;
  signal: AbortSignal;
  onEvent: (event: ModelStreamEvent) => void;
  classes: SdkErrorClasses;
  /** The client's credentials: redacted from a failure's text. */
  secrets: readonly string[];
  /** Reads the provider's rate headers (rate-headers.ts): on the response as `providerLimits`, on a refusal's ProviderError. */
  rateHeaders?: (headers: HeadersLike) => ProviderRateLimits | undefined;
  /** Makes the call's fold; `emit` hands a delta to `onEvent` (guarded: see `guardListener`). */
  fold(emit: (event: ModelStreamEvent) => void): StreamFold<T>;
  /** Starts the SDK call: its stream of items. */
  open(): PromiseLike<AsyncIterable<T>>;
  /** What a stream that ends before the answer has finished is missing, for the error's message. */
  unfinished: string;
}

/**
 * Reads a streaming call to its response: every item goes to the fold (none once the signal has
 * aborted). A throw of the caller's listener is rethrown as it was; a stream that breaks once the
 * answer is `complete` keeps the answer; any other failure is `toProviderError`'s. An abort
 * mid-stream (the SDKs end the iteration quietly) is a `CancelledError`; a stream that ends
 * before the answer has `finished` is a retryable `stream_interrupted` ProviderError.
 * @example
 * return streamResponse({
 *   provider: 'anthropic', signal, onEvent, classes, secrets, fold: accumulator,
 *   open: () => client.messages.create(body, { signal }),
 *   unfinished: 'the stream ended before message_stop',
 * })
 */
export async function streamResponse<T>(call: StreamCall<T>): Promise<ModelResponse> {
  const { provider, signal } = call;
  const out = guardListener(call.onEvent, signal);
  const fold = call.fold(out.emit);
  let limits: ProviderRateLimits | undefined;
  const result = () => (limits ? { ...fold.result(), providerLimits: limits } : fold.result());
  try {
    const { data, headers, json } = await opened(call.open());
    if (headers && call.rateHeaders) limits = call.rateHeaders(headers);
    if (json !== undefined) throw jsonAnswerError(provider, json, call.secrets);
    for await (const item of data) {
      if (signal.aborted) break; // no delta reaches the listener after a cancel
      fold.push(item);
    }
  } catch (e) {
    const own = out.unwrap(e);
    if (own) throw own.listenerError;
    // the connection dropped once the answer was whole (only the stream's end missing): keep it
    if (fold.complete && !signal.aborted) return result();
    throw toProviderError(e, {
      provider,
      signal,
      partialOutput: out.emitted,
      classes: call.classes,
      secrets: call.secrets,
      ...(call.rateHeaders ? { rateHeaders: call.rateHeaders } : {}),
    });
  }
  if (signal.aborted) throw new CancelledError(`${provider} call cancelled`);
  if (!fold.finished)
    throw new ProviderError(`${provider}: ${call.unfinished}`, { retryable: true, code: 'stream_interrupted', partialOutput: out.emitted });
  return result();
}

/**
 * The SDK call's stream, with its response's headers when the SDK gives them (a Stainless
 * client's `APIPromise.withResponse()`); a structural client without it gives the stream alone.
 * A response whose content type is JSON, not a stream, gives its body's text as `json` (the SDKs
 * would read it as a stream without events).
 */
async function opened<T>(call: PromiseLike<AsyncIterable<T>>): Promise<{ data: AsyncIterable<T>; headers?: HeadersLike; json?: string }> {
  const withResponse = (call as { withResponse?: unknown }).withResponse;
  if (typeof withResponse !== 'function') return { data: await call };
  const { data, response } = (await withResponse.call(call)) as { data: AsyncIterable<T>; response?: Partial<Response> };
  const headers = response?.headers;
  if (!headers || typeof headers.get !== 'function') return { data };
  const type = headers.get('content-type') ?? '';
  // application/json or a +json type (problem+json): not ndjson or jsonl, which are streams
  if (/^application\/(?:[\w.-]+\+)?json\b/i.test(type) && typeof response?.text === 'function') {
    return { data, headers, json: await response.text() };
  }
  return { data, headers };
}

/**
 * What a `…ModelFromEnv` builds its client from: the API key and base URL in the environment
 * variables `<prefix>_API_KEY` and `<prefix>_BASE_URL` (optional), and the SDK module, imported on
 * demand (an optional peer dependency). A missing key or package is a `ValidationError`.
 * @example
 * const { mod, apiKey, baseURL } = await sdkFromEnv('openaiModelFromEnv', 'OPENAI', 'openai', () => import('openai'))
 */
export async function sdkFromEnv<M>(
  where: string,
  prefix: string,
  pkg: string,
  load: () => Promise<M>,
): Promise<{ mod: M; apiKey: string; baseURL: string | undefined }> {
  const apiKey = process.env[`${prefix}_API_KEY`];
  if (!apiKey) throw new ValidationError(where, [{ path: [`${prefix}_API_KEY`], message: 'environment variable is not set' }]);
  let mod: M;
  try {
    mod = await load();
  } catch {
    throw new ValidationError(where, [
      { path: [pkg], message: `the optional peer dependency '${pkg}' is not installed (npm install ${pkg})` },
    ]);
  }
  return { mod, apiKey, baseURL: process.env[`${prefix}_BASE_URL`] || undefined };
}

/**
 * Throws `CancelledError` when the signal has already aborted.
 * @example
 * throwIfAborted(request.signal, 'openai')
 */
export function throwIfAborted(signal: AbortSignal, provider: string): void {
  if (signal.aborted) throw new CancelledError(`${provider} call cancelled`);
}
