import type { Clock } from '../contracts/clock.js';
import type { SharedBucket, SharedBuckets } from '../contracts/rate-limits.js';

/** What one call asks of one bucket. */
export type BucketNeed = SharedBucket & { need: number };
/** What one call's end does to one bucket: `delta` given back (negative: taken), `atMost` its level's cap now. */
export type BucketChange = SharedBucket & { delta: number; atMost?: number };

/**
 * Where a limiter's token buckets live (rate-limiter.ts holds the queue): this process's memory,
 * or shared storage. A backend answers synchronously when it can (in memory), so the queue serves
 * its waiters without a turn of the event loop; a shared one answers with a promise.
 */
export interface BucketBackend {
  /**
   * Takes every bucket's need if all hold it (or are full, for a larger need) and none is paused:
   * `{ ms: 0 }`; else takes nothing and answers the ms until they could, and (when it knows) the
   * key of the bucket that is short.
   */
  take(takes: readonly BucketNeed[]): TakeAnswer | Promise<TakeAnswer>;
  /** Settles the buckets; `pauseMs` pauses them for the other processes (the queue pauses its own limits itself). */
  settle(changes: readonly BucketChange[], pauseMs: number): void | Promise<void>;
}
export interface TakeAnswer {
  ms: number;
  short?: string;
}

/**
 * A token bucket: holds up to `capacity` (the per-minute amount), refilled continuously at
 * `perMs`, as providers describe their own limits. A call takes its whole demand once the bucket
 * holds it (or is full, for a demand larger than the bucket): the level may go below zero, which
 * later calls then wait out.
 */
class Bucket {
  private level: number;
  private at: number;
  constructor(
    readonly capacity: number,
    private readonly perMs: number,
    now: number,
  ) {
    this.level = capacity;
    this.at = now;
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

  /** Gives back `delta` (negative: takes more), as far as the capacity; then no more than `atMost`. */
  settle(delta: number, atMost: number, now: number): void {
    this.refill(now);
    this.level = Math.min(this.capacity, this.level + delta, atMost);
  }
}

/** The buckets in this process's memory, on the runtime's clock: each made full when first asked for. */
export function localBuckets(clock: Clock): BucketBackend {
  const buckets = new Map<string, Bucket>();
  const bucket = (b: SharedBucket, now: number) => {
    let x = buckets.get(b.key);
    if (!x) buckets.set(b.key, (x = new Bucket(b.capacity, b.perMs, now)));
    return x;
  };
  return {
    take(takes) {
      const now = clock.now();
      let worst: TakeAnswer = { ms: 0 };
      for (const t of takes) {
        const ms = bucket(t, now).waitFor(t.need, now);
        if (ms > worst.ms) worst = { ms, short: t.key };
      }
      if (worst.ms === 0) for (const t of takes) bucket(t, now).take(t.need, now);
      return worst;
    },
    settle(changes) {
      const now = clock.now();
      for (const c of changes) bucket(c, now).settle(c.delta, c.atMost ?? Infinity, now);
    },
  };
}

/**
 * The buckets in shared storage (`rateLimitBuckets`, e.g. `postgresRateBuckets`): made (`ensure`)
 * before the first take, and again after a failure. A settlement that fails leaves the
 * reservation taken: the limit errs on the safe side.
 */
export function sharedBuckets(store: SharedBuckets, all: readonly SharedBucket[]): BucketBackend {
  let ready: Promise<void> | undefined;
  return {
    async take(takes) {
      try {
        await (ready ??= store.ensure(all));
        return { ms: takes.length === 0 ? 0 : await store.take(takes) };
      } catch (e) {
        ready = undefined;
        throw e;
      }
    },
    async settle(changes, pauseMs) {
      await store.settle(changes, pauseMs).catch(() => undefined);
    },
  };
}
