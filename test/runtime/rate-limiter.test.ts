import { describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { isCancelledError } from '../../src/contracts/errors.js';
import { RateLimit, RateLimits, type CallDemand, type CallPermit, type SharedBuckets } from '../../src/contracts/rate-limits.js';
import { bucketsOf, RateLimiter } from '../../src/runtime/rate-limiter.js';
import { localBuckets, sharedBuckets } from '../../src/runtime/rate-buckets.js';
import type { Clock } from '../../src/contracts/clock.js';

const settle = () => new Promise<void>((resolve) => setImmediate(resolve));
const limits = (...ls: unknown[]) => RateLimits.parse(ls);
const demand = (sessionId: string, inputTokens = 10, outputTokens = 0, model = 'm'): CallDemand => ({
  sessionId,
  provider: 'p',
  model,
  inputTokens,
  outputTokens,
});
const never = new AbortController().signal;

function clockAt0(): SimulatedClock {
  const clock = new SimulatedClock();
  clock.set(1_000_000);
  return clock;
}

/**
 * Shared storage answering a turn later (as a database does), its buckets kept in memory on the
 * test's clock: the queue must serve its waiters the same whether the backend answers at once or not.
 */
function asyncStore(clock: Clock): SharedBuckets {
  const inner = localBuckets(clock);
  return {
    ensure: async () => undefined,
    take: async (takes) => (await Promise.resolve(), (inner.take(takes) as { ms: number }).ms),
    settle: async (changes, pauseMs) => (await Promise.resolve(), inner.settle(changes, pauseMs)),
  };
}

const backends = [
  // the bucket a call waits for is named in memory; shared storage says only that it is short
  ['in memory', (ls: RateLimit[], clock: Clock) => new RateLimiter(ls, clock), 'inputTokensPerMinute'],
  [
    'in shared storage',
    (ls: RateLimit[], clock: Clock) => new RateLimiter(ls, clock, sharedBuckets(asyncStore(clock), bucketsOf(ls))),
    '(shared)',
  ],
] as const;

describe.each(backends)('RateLimiter, buckets %s', (_, newLimiter, short) => {
  it('refuses a rate limit without any limit, and unknown keys', () => {
    expect(RateLimit.safeParse({ provider: 'openai' }).success).toBe(false);
    expect(RateLimit.safeParse({ requestsPerMinute: 10, tokensPerMinute: 5 }).success).toBe(false);
    expect(RateLimit.safeParse({ model: 'gpt', requestsPerMinute: 0 }).success).toBe(false);
    expect(RateLimit.parse({ concurrent: 2 })).toEqual({ concurrent: 2, windowMs: 60_000 });
  });

  it('gives no permit to a call no limit matches', async () => {
    const limiter = newLimiter(limits({ provider: 'other', requestsPerMinute: 1 }, { model: 'x', requestsPerMinute: 1 }), clockAt0());
    expect(await limiter.acquire(demand('s'), never, () => {})).toBeUndefined();
  });

  it('serves waiting sessions oldest first: with 3 calls a window, no session waits more than its place in the queue / 3 windows', async () => {
    const clock = clockAt0();
    const limiter = newLimiter(limits({ provider: 'p', requestsPerMinute: 3, windowMs: 1000 }), clock);
    const granted: string[] = [];
    const waitsMs = new Map<string, number>();
    // 12 sessions, each calling 3 times in a row: every call is queued behind the calls before it
    const sessions = Array.from({ length: 12 }, (_, i) => `s${i}`);
    const start = clock.now();
    const running = sessions.map(async (s) => {
      for (let n = 0; n < 3; n++) {
        const asked = clock.now();
        const permit = await limiter.acquire(demand(s), new AbortController().signal, () => {});
        waitsMs.set(s, Math.max(waitsMs.get(s) ?? 0, clock.now() - asked));
        granted.push(s);
        permit!.done({});
      }
    });
    for (let i = 0; i < 300 && granted.length < 36; i++) {
      clock.increment(100);
      await settle();
    }
    await Promise.all(running);
    // the first round goes to every session before any session's second call (oldest first)
    expect(granted.slice(0, 12)).toEqual(sessions);
    expect(new Set(granted.slice(12, 24))).toEqual(new Set(sessions));
    // 36 calls at 3 a window (3 in the full bucket at first): 11 windows for all; no session's
    // call waited more than the 12 calls ahead of it take, 4 windows
    expect(clock.now() - start).toBeLessThanOrEqual(11_100);
    for (const [, ms] of waitsMs) expect(ms).toBeLessThanOrEqual(4_100);
  });

  it('does not let small calls starve a large one queued before them', async () => {
    const clock = clockAt0();
    const limiter = newLimiter(limits({ inputTokensPerMinute: 100, windowMs: 1000 }), clock);
    const first = await limiter.acquire(demand('a', 60), never, () => {}); // 40 left
    const order: string[] = [];
    const waits: string[] = [];
    const big = limiter.acquire(demand('big', 100), never, (w) => waits.push(`big: ${w.limit}`)).then(() => order.push('big'));
    const small = limiter
      .acquire(demand('small', 10), never, (w) => waits.push(`small: ${w.limit} ahead ${w.ahead}`))
      .then(() => order.push('small'));
    await settle();
    expect(order).toEqual([]); // 40 would serve the small call, but the big one is older
    expect(waits).toEqual([`big: */* ${short}`, 'small: */* queue ahead 1']);
    first!.done({});
    clock.increment(600); // full again: the big call goes; the small one waits for the next 10
    await settle();
    expect(order).toEqual(['big']);
    clock.increment(100);
    await settle();
    await Promise.all([big, small]);
    expect(order).toEqual(['big', 'small']);
  });

  it("does not hold a call behind a waiting call of another limit: another model's calls go on", async () => {
    const clock = clockAt0();
    const limiter = newLimiter(limits({ model: 'a', requestsPerMinute: 1 }, { model: 'b', requestsPerMinute: 1 }), clock);
    await limiter.acquire(demand('s1', 10, 0, 'a'), never, () => {});
    let second = false;
    const waiting = limiter.acquire(demand('s2', 10, 0, 'a'), never, () => {}).then(() => (second = true));
    await settle();
    expect(await limiter.acquire(demand('s3', 10, 0, 'b'), never, () => {})).toBeDefined();
    expect(second).toBe(false);
    clock.increment(60_000);
    await waiting;
  });

  it("settles a call's reservations to the usage it reports", async () => {
    const clock = clockAt0();
    const limiter = newLimiter(limits({ outputTokensPerMinute: 1000, inputTokensPerMinute: 1000, windowMs: 60_000 }), clock);
    const a = await limiter.acquire(demand('a', 100, 900), never, () => {}); // 100 output tokens left
    let waited = false;
    const b = limiter.acquire(demand('b', 100, 500), never, () => (waited = true));
    await settle();
    expect(waited).toBe(true);
    a!.done({ usage: { inputTokens: 100, outputTokens: 50 } }); // 850 given back: 950 left
    expect(await b).toBeDefined();
    expect(clock.now()).toBe(1_000_000); // no time passed: the settlement let it go
  });

  it('is a semaphore for concurrent calls: a call waits for one in flight to end', async () => {
    const limiter = newLimiter(limits({ model: 'm', concurrent: 2 }), clockAt0());
    const a = await limiter.acquire(demand('a'), never, () => {});
    await limiter.acquire(demand('b'), never, () => {});
    let third: CallPermit | undefined;
    const c = limiter.acquire(demand('c'), never, () => {}).then((p) => (third = p));
    // another model's call is not held back by this limit
    expect(await limiter.acquire(demand('d', 10, 0, 'other'), never, () => {})).toBeUndefined();
    await settle();
    expect(third).toBeUndefined();
    a!.done({});
    await c;
    expect(third).toBeDefined();
  });

  it("pauses a limit for a 429's retry-after: calls wait until it ends", async () => {
    const clock = clockAt0();
    const limiter = newLimiter(limits({ provider: 'p', requestsPerMinute: 1000 }), clock);
    const a = await limiter.acquire(demand('a'), never, () => {});
    a!.done({ pauseMs: 5_000 });
    const waits: string[] = [];
    let got = false;
    const b = limiter.acquire(demand('b'), never, (w) => waits.push(w.limit)).then(() => (got = true));
    clock.increment(4_999);
    await settle();
    expect(got).toBe(false);
    expect(waits).toEqual(['p/* paused (429)']);
    clock.increment(1);
    await b;
    expect(got).toBe(true);
  });

  it('ends a wait when its signal aborts, and the calls it held back go', async () => {
    const clock = clockAt0();
    const limiter = newLimiter(limits({ inputTokensPerMinute: 100, windowMs: 1000 }), clock);
    await limiter.acquire(demand('a', 95), never, () => {}); // 5 left
    const stop = new AbortController();
    const big = limiter.acquire(demand('big', 100), stop.signal, () => {});
    let small = false;
    const next = limiter.acquire(demand('small', 5), never, () => {}).then(() => (small = true));
    await settle();
    expect(small).toBe(false);
    stop.abort();
    await expect(big).rejects.toSatisfy(isCancelledError);
    await next;
    expect(small).toBe(true);
  });
});
