import { z } from 'zod';
import { MAX_TIMER_MS } from './config.js';
import { IdInput } from './ids.js';
import type { Usage } from './message.js';
import type { ProviderRateLimits } from './provider-limits.js';

export { ProviderRateLimits } from './provider-limits.js';

const posInt = z.number().int().positive();

/**
 * One entry of the runtime's `rateLimits` option (docs/rate-limits.md): the limits of the model
 * calls whose provider (`ModelProvider.providerName`) and model (`modelId`) it names — leave one
 * out to match any. Every call a limit matches takes from all of its buckets; a call matched by
 * several limits takes from each.
 */
export const RateLimit = z
  .strictObject({
    provider: IdInput.optional(),
    model: IdInput.optional(),
    requestsPerMinute: posInt.optional(),
    inputTokensPerMinute: posInt.optional(),
    outputTokensPerMinute: posInt.optional(),
    /** Calls of this limit in flight at once. */
    concurrent: posInt.optional(),
    /** The length of the limit's "minute" in ms (default 60 000): a test or benchmark scales it down. */
    windowMs: posInt.max(MAX_TIMER_MS).default(60_000),
  })
  .refine(
    (l) =>
      l.requestsPerMinute !== undefined ||
      l.inputTokensPerMinute !== undefined ||
      l.outputTokensPerMinute !== undefined ||
      l.concurrent !== undefined,
    'a rate limit needs at least one of requestsPerMinute, inputTokensPerMinute, outputTokensPerMinute, concurrent',
  );
export type RateLimit = z.output<typeof RateLimit>;
export type RateLimitInput = z.input<typeof RateLimit>;

/** The runtime's `rateLimits` option: none by default. */
export const RateLimits = z.array(RateLimit).default([]);

/** What one model call asks of the limiter before it is sent. */
export interface CallDemand {
  /** Whose call it is: only for the wait's report (the queue is one, oldest first, across sessions). */
  sessionId: string;
  provider?: string;
  model: string;
  /** Estimated input tokens of the request (settled with the usage the provider reports). */
  inputTokens: number;
  /** The call's output cap, reserved until the provider reports what it used. */
  outputTokens: number;
}

/** A call's wait, as `rate_limit_wait` reports it. */
export interface RateLimitWait {
  /** The limit the call waits for, e.g. `openai/gpt-4o inputTokensPerMinute`. */
  limit: string;
  /** Calls queued before it on that limit. */
  ahead: number;
}

/** How a call ended, for its permit. */
export interface CallOutcome {
  /** The usage the provider reported. */
  usage?: Usage;
  /** A 429's retry-after. */
  pauseMs?: number;
  /** The provider's own limits, from its response's rate headers. */
  providerLimits?: ProviderRateLimits;
}

/** What a granted call holds: given back once the call is over. */
export interface CallPermit {
  /**
   * The call is over: with the usage the provider reported, the reservations are settled to it
   * (without one they stay taken: the provider may have counted the call); `pauseMs` (a 429's
   * retry-after) pauses every limit of the call for that long; `providerLimits` holds them until
   * a limit the provider says is spent resets, and lowers a bucket to what the provider says is left.
   */
  done(outcome: CallOutcome): void;
}

/**
 * Shares rate limits between every model call of a runtime (docs/rate-limits.md): a call waits
 * for capacity in one queue, oldest first; its wait ends with a permit, or rejects with
 * `reason()` when `signal` aborts (cancel, stop, the run's maxDurationMs).
 */
export interface CallLimiter {
  /** A permit for the call; undefined when no limit matches it (nothing to give back). */
  acquire(demand: CallDemand, signal: AbortSignal, onWait: (w: RateLimitWait) => void): Promise<CallPermit | undefined>;
}

/** Whether `l` applies to a call of `provider`'s `model`. */
export const limitMatches = (l: RateLimit, provider: string | undefined, model: string): boolean =>
  (l.provider === undefined || l.provider === provider) && (l.model === undefined || l.model === model);

/** A limit's name in waits and errors: `provider/model`, `*` for one left out. */
export const limitName = (l: RateLimit): string => `${l.provider ?? '*'}/${l.model ?? '*'}`;

/** One bucket of a shared limit: its key (the same in every process with the same limit) and size. */
export interface SharedBucket {
  key: string;
  capacity: number;
  /** Refill a ms: capacity / windowMs. */
  perMs: number;
}

/**
 * Where shared token buckets live (`postgresRateBuckets`, docs/rate-limits.md), by their own
 * clock (the database's), so that every process reads one time.
 */
export interface SharedBuckets {
  /** Makes the buckets that do not exist yet, full. */
  ensure(buckets: readonly SharedBucket[]): Promise<void>;
  /**
   * In one statement: if every bucket holds its `need` (or is full, for a larger need) and none is
   * paused, takes them all and answers 0; else takes nothing and answers the ms until they could.
   */
  take(takes: readonly (SharedBucket & { need: number })[]): Promise<number>;
  /**
   * In one statement: gives `delta` back to each bucket (negative: takes more), then lowers it to
   * `atMost` when given (what the provider says is left), and pauses them `pauseMs`.
   */
  settle(changes: readonly (SharedBucket & { delta: number; atMost?: number })[], pauseMs: number): Promise<void>;
}
