import type { Clock } from '../contracts/clock.js';
import { CancelledError } from '../contracts/errors.js';
import type { Usage } from '../contracts/message.js';
import {
  limitMatches,
  limitName,
  type CallDemand,
  type CallLimiter,
  type CallPermit,
  type RateLimit,
  type RateLimitWait,
} from '../contracts/rate-limits.js';

type BucketKind = 'requestsPerMinute' | 'inputTokensPerMinute' | 'outputTokensPerMinute';
const KINDS: readonly BucketKind[] = ['requestsPerMinute', 'inputTokensPerMinute', 'outputTokensPerMinute'];

/**
 * A token bucket: holds up to `capacity` (the per-minute amount), refilled continuously at
 * `capacity / windowMs` a ms, as providers describe their own limits. A call takes its whole
 * demand once the bucket holds it (or is full, for a demand larger than the bucket): the level
 * may go below zero, which later calls then wait out.
 */
class Bucket {
  private level: number;
  private at: number;
  private readonly perMs: number;
  constructor(
    readonly capacity: number,
    windowMs: number,
    now: number,
  ) {
    this.level = capacity;
    this.at = now;
    this.perMs = capacity / windowMs;
  }

  private refill(now: number): void {
    if (now > this.at) this.level = Math.min(this.capacity, this.level + (now - this.at) * this.perMs);
    this.at = Math.max(this.at, now);
  }

  /** Ms until `need` can be taken (0: now). */
  waitFor(need: number, now: number): number {
    this.refill(now);
    const want = Math.min(need, this.capacity);
    // a ms's rounding must not leave a waiter one fraction short when its timer fires
    return this.level + 1e-9 >= want ? 0 : Math.max(1, Math.ceil((want - this.level) / this.perMs));
  }

  take(n: number, now: number): void {
    this.refill(now);
    this.level -= n;
  }

  /** Gives back `n` (negative: takes more), as far as the capacity. */
  give(n: number, now: number): void {
    this.refill(now);
    this.level = Math.min(this.capacity, this.level + n);
  }
}

/** One `rateLimits` entry's state: its buckets, its calls in flight, its pause after a 429. */
class LimitState {
  readonly name: string;
  readonly buckets = new Map<BucketKind, Bucket>();
  inFlight = 0;
  pausedUntil = 0;
  constructor(
    readonly limit: RateLimit,
    now: number,
  ) {
    this.name = limitName(limit);
    for (const k of KINDS) {
      const perMinute = limit[k];
      if (perMinute !== undefined) this.buckets.set(k, new Bucket(perMinute, limit.windowMs, now));
    }
  }

  /** Ms until `d` can start under this limit (0: now; Infinity: when a call in flight ends). */
  waitFor(d: CallDemand, now: number): { ms: number; what: string } {
    if (this.pausedUntil > now) return { ms: this.pausedUntil - now, what: `${this.name} paused (429)` };
    const max = this.limit.concurrent;
    if (max !== undefined && this.inFlight >= max) return { ms: Infinity, what: `${this.name} concurrent` };
    let worst = { ms: 0, what: '' };
    for (const [k, b] of this.buckets) {
      const ms = b.waitFor(need(k, d), now);
      if (ms > worst.ms) worst = { ms, what: `${this.name} ${k}` };
    }
    return worst;
  }

  take(d: CallDemand, now: number): void {
    for (const [k, b] of this.buckets) b.take(need(k, d), now);
    this.inFlight++;
  }
}

const need = (k: BucketKind, d: CallDemand): number =>
  k === 'requestsPerMinute' ? 1 : k === 'inputTokensPerMinute' ? d.inputTokens : d.outputTokens;

interface Waiter {
  demand: CallDemand;
  limits: LimitState[];
  grant(permit: CallPermit): void;
}

/**
 * The in-process limiter (docs/rate-limits.md): token buckets per limit on the runtime's clock,
 * `concurrent` as a semaphore, and one queue served oldest first. A waiting call holds back only
 * the calls behind it that share one of its limits, so no call starves: the oldest waiter of a
 * limit is the next that limit serves.
 * @example
 * const limiter = new RateLimiter([{ provider: 'openai', inputTokensPerMinute: 30_000 }], clock)
 */
export class RateLimiter implements CallLimiter {
  private readonly limits: LimitState[];
  private queue: Waiter[] = [];
  private timer: unknown;
  private timerAt = Infinity;

  constructor(
    limits: readonly RateLimit[],
    private readonly clock: Clock,
  ) {
    const now = clock.now();
    this.limits = limits.map((l) => new LimitState(l, now));
  }

  acquire(demand: CallDemand, signal: AbortSignal, onWait: (w: RateLimitWait) => void): Promise<CallPermit | undefined> {
    const limits = this.limits.filter((l) => limitMatches(l.limit, demand.provider, demand.model));
    if (limits.length === 0) return Promise.resolve(undefined);
    if (signal.aborted) return Promise.reject(new CancelledError('model call cancelled'));
    return new Promise<CallPermit>((resolve, reject) => {
      const onAbort = () => {
        const at = this.queue.indexOf(waiter);
        if (at < 0) return;
        this.queue.splice(at, 1);
        reject(new CancelledError('model call cancelled while waiting for its rate limit'));
        this.pump(); // calls it held back may go now
      };
      const waiter: Waiter = {
        demand,
        limits,
        grant: (permit) => {
          signal.removeEventListener('abort', onAbort);
          resolve(permit);
        },
      };
      this.queue.push(waiter);
      signal.addEventListener('abort', onAbort, { once: true });
      const blocker = this.pump();
      if (this.queue.includes(waiter)) onWait(blocker.get(waiter) ?? { limit: limits[0]!.name, ahead: 0 });
    });
  }

  /**
   * Starts every waiter that can start, oldest first: a waiter that cannot holds its limits for
   * the waiters behind it. Arms one timer for the earliest time a blocked waiter could go.
   * Returns why each left waiter waits.
   */
  private pump(): Map<Waiter, RateLimitWait> {
    const now = this.clock.now();
    const held = new Map<LimitState, number>(); // a limit held by older waiters → how many
    const why = new Map<Waiter, RateLimitWait>();
    const left: Waiter[] = [];
    let wake = Infinity;
    for (const w of this.queue) {
      const ahead = w.limits.find((l) => held.has(l));
      if (ahead) {
        why.set(w, { limit: `${ahead.name} queue`, ahead: held.get(ahead)! });
      } else {
        let worst = { ms: 0, what: '' };
        for (const l of w.limits) {
          const wait = l.waitFor(w.demand, now);
          if (wait.ms > worst.ms) worst = wait;
        }
        if (worst.ms === 0) {
          for (const l of w.limits) l.take(w.demand, now);
          w.grant(this.permit(w));
          continue;
        }
        wake = Math.min(wake, worst.ms);
        why.set(w, { limit: worst.what, ahead: 0 });
      }
      for (const l of w.limits) held.set(l, (held.get(l) ?? 0) + 1);
      left.push(w);
    }
    this.queue = left;
    this.arm(wake === Infinity ? Infinity : now + wake);
    return why;
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
      done: ({ usage, pauseMs }: { usage?: Usage; pauseMs?: number }) => {
        if (over) return;
        over = true;
        const now = this.clock.now();
        for (const l of w.limits) {
          l.inFlight--;
          if (usage) {
            l.buckets.get('inputTokensPerMinute')?.give(w.demand.inputTokens - usage.inputTokens, now);
            l.buckets.get('outputTokensPerMinute')?.give(w.demand.outputTokens - usage.outputTokens, now);
          }
          if (pauseMs !== undefined && pauseMs > 0) l.pausedUntil = Math.max(l.pausedUntil, now + pauseMs);
        }
        this.pump();
      },
    };
  }
}
