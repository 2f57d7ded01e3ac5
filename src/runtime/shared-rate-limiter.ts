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
  type SharedBucket,
  type SharedBuckets,
} from '../contracts/rate-limits.js';
import type { Clock } from '../contracts/clock.js';

export type { SharedBucket, SharedBuckets } from '../contracts/rate-limits.js';

type Kind = 'requestsPerMinute' | 'inputTokensPerMinute' | 'outputTokensPerMinute';
const KINDS: readonly Kind[] = ['requestsPerMinute', 'inputTokensPerMinute', 'outputTokensPerMinute'];
const need = (k: Kind, d: CallDemand): number =>
  k === 'requestsPerMinute' ? 1 : k === 'inputTokensPerMinute' ? d.inputTokens : d.outputTokens;

interface Limit {
  limit: RateLimit;
  name: string;
  buckets: Map<Kind, SharedBucket>;
  inFlight: number;
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
 * The limiter of a pool's processes (docs/rate-limits.md): the token buckets in shared storage
 * (one statement a take, one a settlement), the queue and `concurrent` per process. Within a
 * process calls go oldest first (one take in flight at a time: the queue's head); across
 * processes, whichever head asks first once the buckets refill.
 */
export class SharedRateLimiter implements CallLimiter {
  private readonly limits: Limit[];
  private queue: Waiter[] = [];
  private busy = false;
  private timer: unknown;
  private ready: Promise<void> | undefined;

  constructor(
    limits: readonly RateLimit[],
    private readonly store: SharedBuckets,
    private readonly clock: Clock,
  ) {
    this.limits = limits.map((l) => {
      const buckets = new Map<Kind, SharedBucket>();
      for (const k of KINDS) {
        const cap = l[k];
        if (cap !== undefined)
          buckets.set(k, { key: `${limitName(l)} ${k} ${cap}/${l.windowMs}ms`, capacity: cap, perMs: cap / l.windowMs });
      }
      return { limit: l, name: limitName(l), buckets, inFlight: 0 };
    });
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
        void this.pump();
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
      if (this.queue.length > 1) this.tell(w, { limit: `${limits[0]!.name} queue`, ahead: this.queue.length - 1 });
      void this.pump();
    });
  }

  private tell(w: Waiter, why: RateLimitWait): void {
    if (w.told) return;
    w.told = true;
    w.onWait(why);
  }

  /** Serves the queue's head: one take at a time; a head that must wait arms a timer for when it could go. */
  private async pump(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    try {
      this.ready ??= this.store.ensure(this.limits.flatMap((l) => [...l.buckets.values()]));
      await this.ready;
      for (let w = this.queue[0]; w; w = this.queue[0]) {
        const full = w.limits.find((l) => l.limit.concurrent !== undefined && l.inFlight >= l.limit.concurrent);
        if (full) return this.tell(w, { limit: `${full.name} concurrent`, ahead: 0 }); // a permit's end pumps again
        const takes = w.limits.flatMap((l) => [...l.buckets].map(([k, b]) => ({ ...b, need: need(k, w!.demand) })));
        const ms = takes.length === 0 ? 0 : await this.store.take(takes);
        if (this.queue[0] !== w) {
          // cancelled while the statement ran: what it took goes back
          if (ms === 0 && takes.length > 0)
            void this.store
              .settle(
                takes.map((t) => ({ ...t, delta: t.need })),
                0,
              )
              .catch(() => undefined);
          continue;
        }
        if (ms > 0) {
          this.tell(w, { limit: `${w.limits[0]!.name} (shared)`, ahead: 0 });
          this.timer = this.clock.setTimeout(() => void this.pump(), Math.max(1, Math.ceil(ms)));
          return;
        }
        this.queue.shift();
        for (const l of w.limits) l.inFlight++;
        w.grant(this.permit(w));
      }
    } catch (e) {
      // the buckets could not be read: the head's call fails with that error (the next are tried later)
      const w = this.queue.shift();
      w?.fail(e);
      this.ready = undefined;
      if (this.queue.length > 0) this.timer = this.clock.setTimeout(() => void this.pump(), 100);
    } finally {
      this.busy = false;
    }
  }

  private permit(w: Waiter): CallPermit {
    let over = false;
    return {
      done: ({ usage, pauseMs }: { usage?: Usage; pauseMs?: number }) => {
        if (over) return;
        over = true;
        const changes: (SharedBucket & { delta: number })[] = [];
        for (const l of w.limits) {
          l.inFlight--;
          for (const [k, b] of l.buckets) {
            const delta =
              usage === undefined || k === 'requestsPerMinute'
                ? 0
                : k === 'inputTokensPerMinute'
                  ? w.demand.inputTokens - usage.inputTokens
                  : w.demand.outputTokens - usage.outputTokens;
            if (delta !== 0 || (pauseMs ?? 0) > 0) changes.push({ ...b, delta });
          }
        }
        // a settlement that fails leaves the reservation taken: the limit errs on the safe side
        const settled = changes.length > 0 ? this.store.settle(changes, pauseMs ?? 0).catch(() => undefined) : Promise.resolve();
        void settled.then(() => this.pump());
      },
    };
  }
}
