import { ProviderRateLimits } from '../contracts/rate-limits.js';

/**
 * The providers' rate headers (docs/rate-limits.md): `retry-after`, and their limits read into
 * `ProviderRateLimits` on every response and refusal that carries them. A header that is absent
 * or unreadable is left out.
 */

/** Response headers as `fetch`'s `Headers` (and the SDKs' errors) give them. */
export interface HeadersLike {
  get(name: string): string | null;
}

/**
 * Parses `retry-after-ms` (milliseconds) or `retry-after` (seconds or an HTTP date) into
 * milliseconds; `undefined` when absent or unreadable.
 * @example
 * parseRetryAfter(new Headers({ 'retry-after': '2' })) // 2000
 */
export function parseRetryAfter(headers: HeadersLike | undefined, now = Date.now()): number | undefined {
  if (!headers || typeof headers.get !== 'function') return undefined;
  const ms = headers.get('retry-after-ms');
  if (ms && Number.isFinite(Number(ms))) return Math.max(0, Number(ms));
  const ra = headers.get('retry-after');
  if (!ra) return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(ra)) return Math.round(Number(ra) * 1000);
  const at = Date.parse(ra);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

type Window = { remaining?: number; resetMs?: number };

const UNIT_MS = new Map([
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1_000],
  ['ms', 1],
]);

/**
 * OpenAI's reset durations: `6m0s`, `1s`, `20ms`, `1h2m3.5s`, in ms; undefined when unreadable.
 * @example
 * parseResetDuration('6m0s') // 360000
 */
export function parseResetDuration(text: string): number | undefined {
  const t = text.trim();
  if (!/^(\d+(\.\d+)?(ms|h|m|s))+$/.test(t)) return undefined;
  let ms = 0;
  for (const [, n, unit] of t.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)) ms += Number(n) * UNIT_MS.get(unit!)!;
  return Number.isFinite(ms) ? Math.ceil(ms) : undefined;
}

const count = (v: string | null): number | undefined => {
  if (v === null || !/^\s*\d+(\.\d+)?\s*$/.test(v)) return undefined;
  const n = Number(v);
  return Number.isFinite(n) ? n : undefined;
};

function collect(windows: [keyof ProviderRateLimits, Window][]): ProviderRateLimits | undefined {
  const out: ProviderRateLimits = {};
  for (const [k, w] of windows) if (w.remaining !== undefined || w.resetMs !== undefined) out[k] = w;
  const checked = ProviderRateLimits.safeParse(out);
  return checked.success && Object.keys(checked.data).length > 0 ? checked.data : undefined;
}

const readable = (h: HeadersLike | undefined): h is HeadersLike => !!h && typeof h.get === 'function';

/**
 * OpenAI's `x-ratelimit-remaining-requests` / `-tokens` and `x-ratelimit-reset-requests` /
 * `-tokens` (durations). Its tokens limit counts input and output together: `tokens`.
 * @example
 * openaiRateHeaders(new Headers({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '1s' }))
 * // { requests: { remaining: 0, resetMs: 1000 } }
 */
export function openaiRateHeaders(h: HeadersLike | undefined): ProviderRateLimits | undefined {
  if (!readable(h)) return undefined;
  const window = (kind: string): Window => {
    const reset = h.get(`x-ratelimit-reset-${kind}`);
    const resetMs = reset === null ? undefined : parseResetDuration(reset);
    const remaining = count(h.get(`x-ratelimit-remaining-${kind}`));
    return { ...(remaining !== undefined ? { remaining } : {}), ...(resetMs !== undefined ? { resetMs } : {}) };
  };
  return collect([
    ['requests', window('requests')],
    ['tokens', window('tokens')],
  ]);
}

/**
 * Anthropic's `anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-remaining` and
 * `-reset` (RFC 3339 times, read against `now`).
 * @example
 * anthropicRateHeaders(new Headers({ 'anthropic-ratelimit-input-tokens-remaining': '1200' }))
 * // { inputTokens: { remaining: 1200 } }
 */
export function anthropicRateHeaders(h: HeadersLike | undefined, now = Date.now()): ProviderRateLimits | undefined {
  if (!readable(h)) return undefined;
  const window = (kind: string): Window => {
    const reset = h.get(`anthropic-ratelimit-${kind}-reset`);
    const at = reset === null ? Number.NaN : Date.parse(reset);
    const remaining = count(h.get(`anthropic-ratelimit-${kind}-remaining`));
    return { ...(remaining !== undefined ? { remaining } : {}), ...(Number.isNaN(at) ? {} : { resetMs: Math.max(0, at - now) }) };
  };
  return collect([
    ['requests', window('requests')],
    ['inputTokens', window('input-tokens')],
    ['outputTokens', window('output-tokens')],
    ['tokens', window('tokens')],
  ]);
}
