import { CancelledError, ProviderError, isCancelledError, isProviderError } from '../contracts/errors.js';
import type { ProviderRateLimits } from '../contracts/rate-limits.js';
import { parseRetryAfter, type HeadersLike } from './rate-headers.js';
import { redactSecrets } from './redact.js';
import { asRecord } from './records.js';

/** How the provider adapters map an SDK's failures to `ProviderError` (docs/providers.md, "Errors"). */

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

/** The most of an error's text kept in its message (and so in each attempt's record and the run's end). */
export const ERROR_TEXT_MAX = 1_000;

/**
 * An error's text as a message carries it: an HTML page (a gateway's 502) as its title, and at
 * most ERROR_TEXT_MAX characters, saying how much was cut — never a whole page in every record.
 * @example
 * brief('502 <!DOCTYPE html><html><head><title>502: Bad gateway</title>…') // '502 502: Bad gateway (an HTML page)'
 */
export function brief(text: string): string {
  const html = /<!doctype html|<html[\s>]/i.exec(text);
  if (html) {
    const title = /<title[^>]*>([^<]*)<\/title>/i.exec(text.slice(html.index))?.[1]?.replace(/\s+/g, ' ').trim();
    text = `${text.slice(0, html.index)}${title || 'an HTML page'}${title ? ' (an HTML page)' : ''}`;
  }
  if (text.length <= ERROR_TEXT_MAX) return text;
  let cut = ERROR_TEXT_MAX;
  if (/[\uD800-\uDBFF]/.test(text[cut - 1]!)) cut--; // not half a surrogate pair
  return `${text.slice(0, cut)}… (${text.length - cut} more characters)`;
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
  ) => new ProviderError(`${ctx.provider}: ${brief(redact(what))}`, { ...o, partialOutput, cause: redactCause(e, redact) });
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
    const c = classifyNamedError([err.code, (err.error as { code?: unknown } | undefined)?.code], [err.type, err.code]);
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

/**
 * Retryability and code of an error named inside a body (an error in a stream, a JSON answer): its
 * first numeric code, when one is ≥ 400, is an HTTP status (vLLM / LiteLLM send `code: 400`); else
 * its `type` and string `code`, read as a stream's error type.
 */
function classifyNamedError(codes: unknown[], types: unknown[]): { retryable: boolean; code: string } {
  const numeric = codes.find((x): x is number => typeof x === 'number');
  if (numeric !== undefined && numeric >= 400) return classifyStatus(numeric);
  return classifyStreamErrorType(types.filter((x) => typeof x === 'string').join(' '));
}

/**
 * A 200 answer whose body is JSON where a stream was expected (some gateways answer an error so;
 * the SDKs read it as a stream with no events): the error it carries, classified by its type and
 * code as an error in a stream is, or — a body without an `error` — a retryable `bad_response`.
 * @example
 * jsonAnswerError('openai', '{"error":{"message":"Overloaded","type":"overloaded"}}', []) // retryable, 'overloaded'
 */
export function jsonAnswerError(provider: string, text: string, secrets: readonly string[]): ProviderError {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const err = asRecord(asRecord(body)?.error);
  const message = typeof err?.message === 'string' && err.message !== '' ? err.message : text;
  const c = err === undefined ? { retryable: true, code: 'bad_response' } : classifyNamedError([err.code], [err.type, err.code]);
  const what = brief(redactSecrets(message, secrets));
  return new ProviderError(`${provider}: a JSON answer where a stream was expected: ${what}`, { ...c, partialOutput: false });
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
