import type { Clock } from '../contracts/clock.js';
import { CancelledError } from '../contracts/errors.js';
import {
  limitMatches,
  limitName,
  type CallDemand,
  type CallLimiter,
  type CallOutcome,
  type CallPermit,
  type RateLimit,
  type ProviderRateLimits,
  type RateLimitWait,
  type SharedBucket,
} from '../contracts/rate-limits.js';
import { localBuckets, type BucketBackend, type BucketChange, type BucketNeed, type TakeAnswer } from './rate-buckets.js';

export type BucketKind = 'requestsPerMinute' | 'inputTokensPerMinute' | 'outputTokensPerMinute';
const KINDS: readonly BucketKind[] = ['requestsPerMinute', 'inputTokensPerMinute', 'outputTokensPerMinute'];
const need = (k: BucketKind, d: CallDemand): number =>
  k === 'requestsPerMinute' ? 1 : k === 'inputTokensPerMinute' ? d.inputTokens : d.outputTokens;

/** One `rateLimits` entry: its buckets (keyed the same in every process with the same limit), its calls in flight, its pause. */
interface Limit {
  limit: RateLimit;
  name: string;
  buckets: Map<BucketKind, SharedBucket>;
  inFlight: number;
  pausedUntil: number;
  /** Why it is paused: a 429, or the provider's rate headers. */
  pausedFor: string;
}

interface Waiter {
  demand: CallDemand;
  limits: Limit[];
  told: boolean;
  onWait(w: RateLimitWait): void;
  grant(p: CallPermit): void;
  fail(e: unknown): void;
}

/**
 * The part of a token limit that buckets shared by several processes keep back: a call granted in
 * one process may reach the provider before a call granted a moment earlier in another, and the
 * provider counts by arrival (docs/rate-limits.md, "Shared by a pool's processes"). Requests are
 * counted whole: a request limit keeps nothing back.
 */
export const SHARED_TOKEN_HEADROOM = 0.01;

/** The buckets of the limits `rateLimits` lists, as shared storage keys them (`headroom`: as for limitOf). */
export function bucketsOf(limits: readonly RateLimit[], headroom = 0): SharedBucket[] {
  return limits.flatMap((l) => [...limitOf(l, headroom).buckets.values()]);
}

/** A limit's buckets, a token bucket holding `1 - headroom` of its limit (keyed by the limit as given). */
function limitOf(l: RateLimit, headroom = 0): Limit {
  const buckets = new Map<BucketKind, SharedBucket>();
  for (const k of KINDS) {
    const cap = l[k];
    if (cap === undefined) continue;
    const usable = k === 'requestsPerMinute' ? cap : cap * (1 - headroom);
    buckets.set(k, { key: `${limitName(l)} ${k} ${cap}/${l.windowMs}ms`, capacity: usable, perMs: usable / l.windowMs });
  }
  return { limit: l, name: limitName(l), buckets, inFlight: 0, pausedUntil: 0, pausedFor: '' };
}

/**
 * What a provider's rate headers ask of the limits of the call that read them: hold every call
 * until the reset of a limit the provider says is spent (`holdMs`), and no bucket above what the
 * provider says is left (`atMost`; OpenAI's tokens count input and output together).
 */
export function providerCaps(p: ProviderRateLimits | undefined): { holdMs: number; atMost: Map<BucketKind, number> } {
  const atMost = new Map<BucketKind, number>();
  let holdMs = 0;
  if (!p) return { holdMs, atMost };
  for (const w of [p.requests, p.inputTokens, p.outputTokens, p.tokens])
    if (w?.remaining === 0 && w.resetMs !== undefined) holdMs = Math.max(holdMs, w.resetMs);
  const cap = (k: BucketKind, ...ws: (number | undefined)[]) => {
    const known = ws.filter((n): n is number => n !== undefined);
    if (known.length > 0) atMost.set(k, Math.min(...known));
  };
  cap('requestsPerMinute', p.requests?.remaining);
  cap('inputTokensPerMinute', p.inputTokens?.remaining, p.tokens?.remaining);
  cap('outputTokensPerMinute', p.outputTokens?.remaining, p.tokens?.remaining);
  return { holdMs, atMost };
}

/**
 * The limiter (docs/rate-limits.md): one queue served oldest first, `concurrent` as a semaphore
 * and a 429's pause per limit, the token buckets in a backend — this process's memory
 * (`localBuckets`, the default) or shared storage (`sharedBuckets`: a pool's processes). A
 * waiting call holds back only the calls behind it that share one of its limits, so no call
 * starves: the oldest waiter of a limit is the next that limit serves.
 * @example
 * const limiter = new RateLimiter([{ provider: 'openai', inputTokensPerMinute: 30_000 }], clock)
 */
export class RateLimiter implements CallLimiter {
  private readonly limits: Limit[];
  private queue: Waiter[] = [];
  private pumping = false;
  private again = false;
  private timer: unknown;
  private timerAt = Infinity;

  constructor(
    limits: readonly RateLimit[],
    private readonly clock: Clock,
    private readonly buckets: BucketBackend = localBuckets(clock),
    headroom = 0,
  ) {
    this.limits = limits.map((l) => limitOf(l, headroom));
  }

  acquire(demand: CallDemand, signal: AbortSignal, onWait: (w: RateLimitWait) => void): Promise<CallPermit | undefined> {
    const limits = this.limits.filter((l) => limitMatches(l.limit, demand.provider, demand.model));
    if (limits.length === 0) return Promise.resolve(undefined);
    if (signal.aborted) return Promise.reject(new CancelledError('model call cancelled'));
    return new Promise<CallPermit>((resolve, reject) => {
      const onAbort = () => {
        const at = this.queue.indexOf(w);
        if (at < 0) return;
        this.queue.splice(at, 1);
        reject(new CancelledError('model call cancelled while waiting for its rate limit'));
        this.pump(); // calls it held back may go now
      };
      const w: Waiter = {
        demand,
        limits,
        told: false,
        onWait,
        grant: (p) => (signal.removeEventListener('abort', onAbort), resolve(p)),
        fail: (e) => (signal.removeEventListener('abort', onAbort), reject(e)),
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.queue.push(w);
      this.pump();
    });
  }

  /** Serves the queue; one pass at a time (a pump asked for meanwhile runs right after it). */
  private pump(): void {
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    const done = () => {
      this.pumping = false;
      if (this.again) {
        this.again = false;
        this.pump();
      }
    };
    const pass = this.pass();
    if (pass instanceof Promise) void pass.then(done);
    else done();
  }

  /**
   * One pass over the queue, oldest first: a waiter that cannot go holds its limits for the
   * waiters behind it. Synchronous while the backend answers synchronously. Arms one timer for
   * the earliest time a blocked waiter could go.
   */
  private pass(): void | Promise<void> {
    const held = new Map<Limit, number>(); // a limit held by older waiters → how many
    const waiting = [...this.queue];
    let wake = Infinity;
    const step = (i: number): void | Promise<void> => {
      for (; i < waiting.length; i++) {
        const w = waiting[i]!;
        if (!this.queue.includes(w)) continue; // cancelled meanwhile
        const ahead = w.limits.find((l) => held.has(l));
        if (ahead) {
          this.tell(w, { limit: `${ahead.name} queue`, ahead: held.get(ahead)! });
          for (const l of w.limits) held.set(l, (held.get(l) ?? 0) + 1);
          continue;
        }
        const local = this.localWait(w);
        if (local) {
          wake = Math.min(wake, local.ms);
          this.tell(w, { limit: local.what, ahead: 0 });
          for (const l of w.limits) held.set(l, (held.get(l) ?? 0) + 1);
          continue;
        }
        const takes = w.limits.flatMap((l) => [...l.buckets].map(([k, b]) => ({ ...b, need: need(k, w.demand) })));
        let answer: TakeAnswer | Promise<TakeAnswer>;
        try {
          answer = this.buckets.take(takes);
        } catch (e) {
          return this.failed(w, e);
        }
        if (answer instanceof Promise) {
          const next = i + 1;
          return answer.then(
            (a) => (this.answered(w, takes, a, held, (ms) => (wake = Math.min(wake, ms))), step(next)),
            (e: unknown) => this.failed(w, e),
          );
        }
        this.answered(w, takes, answer, held, (ms) => (wake = Math.min(wake, ms)));
      }
      this.arm(wake === Infinity ? Infinity : this.clock.now() + wake);
    };
    return step(0);
  }

  /** Why `w` cannot go by what this process knows (a limit paused, or at its `concurrent`), or undefined. */
  private localWait(w: Waiter): { ms: number; what: string } | undefined {
    const now = this.clock.now();
    let worst: { ms: number; what: string } | undefined;
    for (const l of w.limits) {
      if (l.pausedUntil > now && l.pausedUntil - now > (worst?.ms ?? 0))
        worst = { ms: l.pausedUntil - now, what: `${l.name} paused (${l.pausedFor})` };
    }
    if (worst) return worst;
    const full = w.limits.find((l) => l.limit.concurrent !== undefined && l.inFlight >= l.limit.concurrent);
    // a permit's end serves the queue again
    return full ? { ms: Infinity, what: `${full.name} concurrent` } : undefined;
  }

  private answered(w: Waiter, takes: BucketNeed[], a: TakeAnswer, held: Map<Limit, number>, wakeIn: (ms: number) => void): void {
    const at = this.queue.indexOf(w);
    if (at < 0) {
      // cancelled while the backend answered: what it took goes back
      if (a.ms === 0 && takes.length > 0)
        void this.buckets.settle(
          takes.map((t) => ({ ...t, delta: t.need })),
          0,
        );
      return;
    }
    if (a.ms === 0) {
      this.queue.splice(at, 1);
      for (const l of w.limits) l.inFlight++;
      w.grant(this.permit(w));
      return;
    }
    wakeIn(a.ms);
    this.tell(w, { limit: this.shortName(w, a.short), ahead: 0 });
    for (const l of w.limits) held.set(l, (held.get(l) ?? 0) + 1);
  }

  /** The backend could not be read: the call fails with its error; the others are tried again shortly. */
  private failed(w: Waiter, e: unknown): void {
    const at = this.queue.indexOf(w);
    if (at >= 0) {
      this.queue.splice(at, 1);
      w.fail(e);
    }
    this.arm(this.clock.now() + 100);
  }

  private shortName(w: Waiter, key: string | undefined): string {
    for (const l of w.limits) for (const [k, b] of l.buckets) if (b.key === key) return `${l.name} ${k}`;
    return `${w.limits[0]!.name} (shared)`;
  }

  private tell(w: Waiter, why: RateLimitWait): void {
    if (w.told) return;
    w.told = true;
    w.onWait(why);
  }

  private arm(at: number): void {
    if (at === this.timerAt) return;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = at;
    if (at === Infinity) return;
    this.timer = this.clock.setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Infinity;
        this.pump();
      },
      Math.max(0, at - this.clock.now()),
    );
  }

  private permit(w: Waiter): CallPermit {
    let over = false;
    return {
      done: ({ usage, pauseMs: retryAfter = 0, providerLimits }: CallOutcome) => {
        if (over) return;
        over = true;
        const caps = providerCaps(providerLimits);
        const pauseMs = Math.max(retryAfter, caps.holdMs);
        const pausedFor = retryAfter >= caps.holdMs ? '429' : 'provider limit spent';
        const now = this.clock.now();
        const changes: BucketChange[] = [];
        for (const l of w.limits) {
          l.inFlight--;
          if (pauseMs > 0 && now + pauseMs > l.pausedUntil) Object.assign(l, { pausedUntil: now + pauseMs, pausedFor });
          for (const [k, b] of l.buckets) {
            const delta =
              usage === undefined || k === 'requestsPerMinute'
                ? 0
                : k === 'inputTokensPerMinute'
                  ? w.demand.inputTokens - usage.inputTokens
                  : w.demand.outputTokens - usage.outputTokens;
            const atMost = caps.atMost.get(k);
            if (delta !== 0 || pauseMs > 0 || atMost !== undefined)
              changes.push({ ...b, delta, ...(atMost !== undefined ? { atMost } : {}) });
          }
        }
        const settled = changes.length > 0 ? this.buckets.settle(changes, pauseMs) : undefined;
        if (settled instanceof Promise) void settled.then(() => this.pump());
        else this.pump();
      },
    };
  }
}
