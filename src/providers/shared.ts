import { CancelledError, ProviderError, ValidationError, isCancelledError, isProviderError } from '../contracts/errors.js';
import type { ModelResponse, ModelStreamEvent } from '../contracts/model.js';
import type { ProviderRateLimits } from '../contracts/rate-limits.js';
import { parseRetryAfter, type HeadersLike } from './rate-headers.js';
import { redactSecrets } from './redact.js';

/**
 * Helpers shared by the provider adapters: mapping SDK failures to `ProviderError`, guarding the caller's `onEvent` listener, reading a streaming call to its
 * response, and loading an SDK from the environment.
 */

type Ctor = abstract new (...args: never[]) => unknown;

/**
 * The error classes a Stainless-generated SDK client exposes as statics (`OpenAI.APIError`, …).
 * @example
 * const { APIError } = sdkErrorClasses(client)
 */
export interface SdkErrorClasses {
  APIError?: Ctor;
  APIConnectionError?: Ctor;
  APIConnectionTimeoutError?: Ctor;
  APIUserAbortError?: Ctor;
}

/**
 * Reads the SDK's error classes from the client the user passed in, so that `instanceof` checks
 * use that SDK copy without importing it at run time (the SDKs are optional peer dependencies).
 * @example
 * const classes = sdkErrorClasses(client) // client.constructor.APIError, …
 */
export function sdkErrorClasses(client: object): SdkErrorClasses {
  const c = (client as { constructor?: Partial<Record<keyof SdkErrorClasses, unknown>> }).constructor ?? {};
  const pick = (k: keyof SdkErrorClasses) => (typeof c[k] === 'function' ? (c[k] as Ctor) : undefined);
  return {
    APIError: pick('APIError'),
    APIConnectionError: pick('APIConnectionError'),
    APIConnectionTimeoutError: pick('APIConnectionTimeoutError'),
    APIUserAbortError: pick('APIUserAbortError'),
  };
}

/**
 * The SDK's error, kept as the ProviderError's cause (apps check its class), with the secrets
 * redacted from its message and stack in place: it was thrown to us, and it is what gets logged.
 */
function redactCause(e: unknown, redact: (text: string) => string): unknown {
  if (!(e instanceof Error)) return e;
  try {
    e.message = redact(e.message);
    if (typeof e.stack === 'string') e.stack = redact(e.stack);
  } catch {
    // a frozen error: its text stays out of the log anyway (the ProviderError's message is redacted)
  }
  return e;
}

/** `instanceof` the SDK class when known, else a match on the class names in the prototype chain. */
function is(e: unknown, cls: Ctor | undefined, name: string): boolean {
  if (typeof e !== 'object' || e === null) return false;
  if (cls && e instanceof cls) return true;
  for (let p = Object.getPrototypeOf(e); p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    if ((p as { constructor?: { name?: string } }).constructor?.name === name) return true;
  }
  return false;
}

/**
 * Retryability and a provider-neutral code for an HTTP status.
 * @example
 * classifyStatus(529) // { retryable: true, code: 'overloaded' }
 */
export function classifyStatus(status: number): { retryable: boolean; code: string } {
  switch (status) {
    case 400:
      return { retryable: false, code: 'bad_request' };
    case 401:
      return { retryable: false, code: 'auth' };
    case 403:
      return { retryable: false, code: 'permission' };
    case 404:
      return { retryable: false, code: 'not_found' };
    case 408:
      return { retryable: true, code: 'timeout' };
    case 409:
      return { retryable: true, code: 'conflict' };
    case 413:
      return { retryable: false, code: 'too_large' };
    case 422:
      return { retryable: false, code: 'unprocessable' };
    case 429:
      return { retryable: true, code: 'rate_limit' };
    case 529:
      return { retryable: true, code: 'overloaded' };
  }
  if (status >= 500) return { retryable: true, code: 'server' };
  return { retryable: false, code: `http_${status}` };
}

/**
 * Retryability and a provider-neutral code for an error `type`/`code` string sent inside a stream
 * (Anthropic `event: error`, an OpenAI `{ error }` chunk, a Responses `error` event or failed response).
 * @example
 * classifyStreamErrorType('rate_limit_exceeded') // { retryable: true, code: 'rate_limit' }
 */
export function classifyStreamErrorType(raw: string): { retryable: boolean; code: string } {
  // snake_case (OpenAI, Anthropic) or class-style names (`BadRequestError`: vLLM, LiteLLM)
  const type = raw.replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase();
  if (/overloaded/.test(type)) return { retryable: true, code: 'overloaded' };
  if (/bad_request/.test(type)) return { retryable: false, code: 'bad_request' };
  if (/unprocessable|context_length/.test(type)) return { retryable: false, code: 'bad_request' };
  if (/invalid_request|request_too_large/.test(type)) return { retryable: false, code: 'bad_request' };
  if (/authentication|invalid_api_key/.test(type)) return { retryable: false, code: 'auth' };
  if (/permission|billing|insufficient_quota/.test(type)) return { retryable: false, code: 'permission' };
  // the Responses API's codes for input it cannot take (invalid_prompt, invalid_image_url, empty_image_file, …)
  if (/\b(invalid_|empty_image|unsupported_|image_)/.test(type)) return { retryable: false, code: 'bad_request' };
  if (/not_found/.test(type)) return { retryable: false, code: 'not_found' };
  if (/rate_limit|\brequests\b|\btokens\b/.test(type)) return { retryable: true, code: 'rate_limit' };
  if (/timeout/.test(type)) return { retryable: true, code: 'timeout' };
  return { retryable: true, code: 'server' };
}

/**
 * What `toProviderError` needs to know about the call that failed.
 * @example
 * const ctx: FailureContext = { provider: 'openai', signal, partialOutput: false, classes: sdkErrorClasses(client) }
 */
export interface FailureContext {
  provider: string;
  signal: AbortSignal;
  /** Whether any delta had reached `onEvent` before the failure. */
  partialOutput: boolean;
  classes: SdkErrorClasses;
  /** The client's credentials: redacted from the error's text (redact.ts). */
  secrets?: readonly string[];
  /** Reads the provider's rate headers of a refusal (rate-headers.ts). */
  rateHeaders?: (headers: HeadersLike) => ProviderRateLimits | undefined;
}

/**
 * Maps whatever an SDK call or its stream threw to `CancelledError` (the caller's signal aborted)
 * or `ProviderError` (everything else). Already-typed errors pass through unchanged.
 * @example
 * try { … } catch (e) { throw toProviderError(e, { provider: 'openai', signal, partialOutput, classes }) }
 */
export function toProviderError(e: unknown, ctx: FailureContext): ProviderError | CancelledError {
  if (isProviderError(e) || isCancelledError(e)) return e;
  if (ctx.signal.aborted) return new CancelledError(`${ctx.provider} call cancelled`);
  const { classes: k, partialOutput } = ctx;
  const redact = (text: string) => redactSecrets(text, ctx.secrets);
  const make = (
    what: string,
    o: { retryable: boolean; code: string; status?: number; retryAfterMs?: number; providerLimits?: ProviderRateLimits },
  ) => new ProviderError(`${ctx.provider}: ${redact(what)}`, { ...o, partialOutput, cause: redactCause(e, redact) });
  const message = e instanceof Error ? e.message : String(e);

  if (is(e, k.APIUserAbortError, 'APIUserAbortError')) return make(`request aborted: ${message}`, { retryable: true, code: 'aborted' });
  if (is(e, k.APIConnectionTimeoutError, 'APIConnectionTimeoutError'))
    return make(`request timed out: ${message}`, { retryable: true, code: 'timeout' });
  if (is(e, k.APIConnectionError, 'APIConnectionError')) {
    const cause = (e as { cause?: unknown }).cause;
    const detail = cause instanceof Error ? ` (${cause.message})` : '';
    return make(`connection failed: ${message}${detail}`, { retryable: true, code: partialOutput ? 'stream_interrupted' : 'connection' });
  }
  if (is(e, k.APIError, 'APIError')) {
    const err = e as { status?: unknown; headers?: HeadersLike; type?: unknown; code?: unknown; error?: unknown };
    const text = apiErrorText(err.status, err.error) ?? message;
    if (typeof err.status === 'number') {
      // OpenAI sends "out of credits" as a 429: waiting does not help (as the same error in a stream)
      const kind = [
        err.type,
        err.code,
        (err.error as { type?: unknown; code?: unknown } | undefined)?.type,
        (err.error as { code?: unknown } | undefined)?.code,
      ]
        .filter((x) => typeof x === 'string')
        .join(' ');
      const c =
        err.status === 429 && /insufficient_quota|billing/.test(kind)
          ? { retryable: false, code: 'permission' }
          : classifyStatus(err.status);
      const shouldRetry = err.headers?.get?.('x-should-retry');
      const retryable = shouldRetry === 'true' ? true : shouldRetry === 'false' ? false : c.retryable;
      const providerLimits = err.headers?.get ? ctx.rateHeaders?.(err.headers) : undefined;
      return make(text, {
        retryable,
        code: c.code,
        status: err.status,
        retryAfterMs: parseRetryAfter(err.headers),
        ...(providerLimits ? { providerLimits } : {}),
      });
    }
    // a numeric code inside the stream is an HTTP status (vLLM / LiteLLM send `code: 400`)
    const numeric = [err.code, (err.error as { code?: unknown } | undefined)?.code].find((x): x is number => typeof x === 'number');
    if (numeric !== undefined && numeric >= 400) {
      const c = classifyStatus(numeric);
      return make(`error in stream: ${text}`, { retryable: c.retryable, code: c.code });
    }
    const type = [err.type, err.code].filter((x) => typeof x === 'string').join(' ');
    const c = classifyStreamErrorType(type);
    return make(`error in stream: ${text}`, { retryable: c.retryable, code: c.code });
  }
  if (e instanceof SyntaxError) return make(`unreadable stream data: ${message}`, { retryable: true, code: 'bad_response' });
  if (isNetworkError(e)) {
    return make(`${partialOutput ? 'stream broken after output began' : 'connection failed'}: ${message}`, {
      retryable: true,
      code: partialOutput ? 'stream_interrupted' : 'connection',
    });
  }
  return make(`unexpected failure: ${message}`, { retryable: false, code: 'unknown' });
}

/**
 * The text of an API error whose body is Anthropic's `{ type: 'error', error: { type, message } }`
 * (an HTTP error's body, or an `event: error` in the stream): `<status> <error.message>`, where the
 * SDK's own message is the whole body as JSON. Undefined for any other body (OpenAI's SDK already
 * reads its `error.message`).
 */
function apiErrorText(status: unknown, body: unknown): string | undefined {
  const text = asRecord(asRecord(body)?.error)?.message;
  if (typeof text !== 'string' || text === '') return undefined;
  return typeof status === 'number' ? `${status} ${text}` : text;
}

const NETWORK_CODES = /^(ECONNRESET|ECONNREFUSED|ECONNABORTED|EPIPE|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|ENETUNREACH|EHOSTUNREACH|UND_ERR_\w+)$/;

/** undici's `TypeError: terminated` / `fetch failed`, or a socket error code, anywhere in the cause chain. */
function isNetworkError(e: unknown): boolean {
  for (let cur: unknown = e, depth = 0; cur && depth < 5; cur = (cur as { cause?: unknown }).cause, depth++) {
    const { code, message, name } = cur as { code?: unknown; message?: unknown; name?: unknown };
    if (typeof code === 'string' && NETWORK_CODES.test(code)) return true;
    if (name === 'TypeError' && (message === 'terminated' || message === 'fetch failed')) return true;
    if (name === 'SocketError' || name === 'AbortError') return true;
  }
  return false;
}

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
    const { data, headers } = await opened(call.open());
    if (headers && call.rateHeaders) limits = call.rateHeaders(headers);
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
 */
async function opened<T>(call: PromiseLike<AsyncIterable<T>>): Promise<{ data: AsyncIterable<T>; headers?: HeadersLike }> {
  const withResponse = (call as { withResponse?: unknown }).withResponse;
  if (typeof withResponse !== 'function') return { data: await call };
  const { data, response } = (await withResponse.call(call)) as { data: AsyncIterable<T>; response?: { headers?: HeadersLike } };
  const headers = response?.headers;
  return { data, ...(headers && typeof headers.get === 'function' ? { headers } : {}) };
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

/**
 * A JSON object (not an array or null) or `undefined`.
 * @example
 * asRecord(message.providerData?.anthropic)?.content
 */
export function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}
