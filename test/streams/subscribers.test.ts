import { SimulatedClock } from 'xstate';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { isStoreClosedError, isValidationError } from '../../src/contracts/errors.js';
import { SubscriberHub, type DeliveryError } from '../../src/streams/subscribers.js';
import { env, gatedListener, settle, track } from '../helpers/hub.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('SubscriberHub: options', () => {
  it('rejects bad options and listeners with a ValidationError', () => {
    const hub = new SubscriberHub();
    const fails = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return isValidationError(e) ? e.issues.map((i) => i.path.join('.')) : 'other';
      }
      return 'none';
    };
    expect(fails(() => hub.subscribe(() => {}, { capacity: 0 }))).toEqual(['capacity']);
    expect(fails(() => hub.subscribe(() => {}, { deliveryTimeoutMs: 1.5 }))).toEqual(['deliveryTimeoutMs']);
    expect(fails(() => hub.subscribe(() => {}, { name: '' }))).toEqual(['name']);
    expect(fails(() => hub.subscribe(() => {}, { capcity: 3 } as never))).toEqual(['']);
    expect(fails(() => hub.subscribe('nope' as never))).toEqual(['']);
    expect(fails(() => new SubscriberHub({ maxErrors: -1 }))).toEqual(['maxErrors']);
    expect(hub.size).toBe(0);
  });

  it('refuses subscribers after close', () => {
    const hub = new SubscriberHub();
    hub.close();
    let thrown: unknown;
    try {
      hub.subscribe(() => {});
    } catch (e) {
      thrown = e;
    }
    expect(isStoreClosedError(thrown)).toBe(true);
  });
});

describe('SubscriberHub: non-required subscribers', () => {
  it('delivers in order, one at a time, waiting for a returned promise', async () => {
    const hub = new SubscriberHub();
    const g = gatedListener();
    hub.subscribe(g.listener, { name: 'ui' });
    for (let i = 1; i <= 3; i++) await hub.publish(env(i));
    await settle();
    expect(g.seen).toEqual([1]);
    g.gates[0]!.resolve();
    await settle();
    expect(g.seen).toEqual([1, 2]);
    g.gates[1]!.resolve();
    await settle();
    g.gates[2]!.resolve();
    await hub.whenIdle();
    expect(g.seen).toEqual([1, 2, 3]);
    expect(g.maxInFlight()).toBe(1);
    expect(hub.takeErrors()).toEqual([]);
  });

  it('closes on overflow with reason closed and the seq that did not fit', async () => {
    const hub = new SubscriberHub();
    const g = gatedListener();
    hub.subscribe(g.listener, { name: 'slow', capacity: 2 });
    // seq 1 is in flight, 2 and 3 fill the queue, 4 does not fit.
    for (let i = 1; i <= 6; i++) await hub.publish(env(i));
    expect(hub.size).toBe(0);
    const errors = hub.takeErrors();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ consumer: 'slow', seq: 4, reason: 'closed', runId: 'r1', attemptId: 'a1' });
    g.gates[0]!.reject(new Error('late failure is not reported'));
    await settle();
    expect(g.seen).toEqual([1]);
    expect(hub.takeErrors()).toEqual([]);
  });

  it('a synchronous throw is an error and closes the subscriber', async () => {
    const hub = new SubscriberHub();
    const seen: number[] = [];
    hub.subscribe(
      (e) => {
        seen.push(e.seq);
        if (e.seq === 2) throw new Error('boom');
      },
      { name: 'thrower' },
    );
    for (let i = 1; i <= 4; i++) await hub.publish(env(i));
    await hub.whenIdle();
    expect(seen).toEqual([1, 2]);
    expect(hub.takeErrors()).toEqual([{ consumer: 'thrower', seq: 2, reason: 'error', message: 'boom', runId: 'r1', attemptId: 'a1' }]);
    expect(hub.size).toBe(0);
  });

  it('a rejected promise is an error and closes the subscriber', async () => {
    const hub = new SubscriberHub();
    const seen: number[] = [];
    hub.subscribe(
      async (e) => {
        seen.push(e.seq);
        if (e.seq === 1) throw new Error('rejected');
      },
      { name: 'rejecter' },
    );
    await hub.publish(env(1));
    await hub.publish(env(2));
    await hub.whenIdle();
    expect(seen).toEqual([1]);
    expect(hub.takeErrors()).toMatchObject([{ consumer: 'rejecter', seq: 1, reason: 'error', message: 'rejected' }]);
  });

  it('a listener slower than deliveryTimeoutMs times out and is closed', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] }); // the default clock: Date.now and the global timers
    const hub = new SubscriberHub();
    const g = gatedListener();
    hub.subscribe(g.listener, { name: 'sluggish', deliveryTimeoutMs: 500 });
    await hub.publish(env(1));
    await hub.publish(env(2));
    await vi.advanceTimersByTimeAsync(499);
    expect(hub.takeErrors()).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(hub.takeErrors()).toMatchObject([{ consumer: 'sluggish', seq: 1, reason: 'timeout' }]);
    expect(hub.size).toBe(0);
    g.gates[0]!.resolve();
    await settle();
    expect(g.seen).toEqual([1]);
  });

  it("times a delivery out on the hub's clock, deliveryTimeoutMs after that delivery started", async () => {
    const clock = new SimulatedClock();
    const hub = new SubscriberHub({ clock });
    const g = gatedListener();
    hub.subscribe(g.listener, { name: 'sluggish', deliveryTimeoutMs: 500 });
    await hub.publish(env(1));
    await hub.publish(env(2));
    await settle();
    clock.increment(300);
    g.gates[0]!.resolve(); // 2 goes out at 300 ms
    await settle();
    expect(g.seen).toEqual([1, 2]);
    clock.increment(200); // 1's deadline: 2 is only 200 ms into its delivery
    clock.increment(299);
    expect(hub.takeErrors()).toEqual([]);
    expect(hub.size).toBe(1);
    clock.increment(1);
    expect(hub.takeErrors()).toMatchObject([{ consumer: 'sluggish', seq: 2, reason: 'timeout', message: 'no answer within 500 ms' }]);
    expect(hub.size).toBe(0);
  });

  it('a slow subscriber never delays publish', async () => {
    const hub = new SubscriberHub();
    const stuck = gatedListener();
    const fast: number[] = [];
    hub.subscribe(stuck.listener, { name: 'stuck', capacity: 4 });
    hub.subscribe((e) => void fast.push(e.seq), { name: 'fast' });
    for (let i = 1; i <= 100; i++) {
      const t = track(hub.publish(env(i)));
      await Promise.resolve();
      expect(t.done).toBe(true);
    }
    await hub.whenIdle();
    expect(fast).toHaveLength(100);
    expect(hub.takeErrors()).toMatchObject([{ consumer: 'stuck', seq: 6, reason: 'closed' }]);
  });

  it('unsubscribe during a delivery stops deliveries and reports nothing', async () => {
    const clock = new SimulatedClock();
    const hub = new SubscriberHub({ clock });
    const g = gatedListener();
    const off = hub.subscribe(g.listener, { name: 'leaver', deliveryTimeoutMs: 50 });
    await hub.publish(env(1));
    await hub.publish(env(2));
    await settle();
    expect(g.seen).toEqual([1]);
    off();
    off();
    g.gates[0]!.reject(new Error('ignored'));
    await hub.publish(env(3));
    clock.increment(80); // past the delivery timeout
    await settle();
    expect(g.seen).toEqual([1]);
    expect(hub.takeErrors()).toEqual([]);
    expect(hub.size).toBe(0);
  });

  it('a listener may unsubscribe itself', async () => {
    const hub = new SubscriberHub();
    const seen: number[] = [];
    const off = hub.subscribe((e) => {
      seen.push(e.seq);
      if (e.seq === 2) off();
    });
    for (let i = 1; i <= 4; i++) await hub.publish(env(i));
    await hub.whenIdle();
    expect(seen).toEqual([1, 2]);
    expect(hub.takeErrors()).toEqual([]);
  });
});

describe('SubscriberHub: collecting delivery errors', () => {
  it('takes the errors of one attempt, leaves the others, and emits each on errors$', async () => {
    const hub = new SubscriberHub();
    const emitted: DeliveryError[] = [];
    hub.errors$.subscribe((e) => emitted.push(e));
    hub.subscribe(
      (e) => {
        if (e.seq === 1) throw new Error('first');
      },
      { name: 'a' },
    );
    hub.subscribe(
      (e) => {
        if (e.seq === 2) throw new Error('second');
      },
      { name: 'b' },
    );
    await hub.publish(env(1, 'r1', 'a1'));
    await hub.publish(env(2, 'r1', 'a2'));
    await hub.whenIdle();
    expect(emitted.map((e) => e.consumer)).toEqual(['a', 'b']);
    expect(hub.takeErrors({ runId: 'r1', attemptId: 'a2' })).toEqual([
      { consumer: 'b', seq: 2, reason: 'error', message: 'second', runId: 'r1', attemptId: 'a2' },
    ]);
    expect(hub.takeErrors({ runId: 'r1', attemptId: 'a2' })).toEqual([]);
    expect(hub.takeErrors().map((e) => e.consumer)).toEqual(['a']);
  });

  it('keeps at most maxErrors, dropping the oldest', async () => {
    const hub = new SubscriberHub({ maxErrors: 2 });
    for (let i = 0; i < 3; i++)
      hub.subscribe(
        () => {
          throw new Error(`e${i}`);
        },
        { name: `s${i}` },
      );
    await hub.publish(env(1));
    await hub.whenIdle();
    expect(hub.takeErrors().map((e) => e.consumer)).toEqual(['s1', 's2']);
    expect(hub.droppedErrors).toBe(1);
  });
});

describe('SubscriberHub: capacity', () => {
  it('an idle subscriber that keeps up is not closed by a burst of capacity + 1 envelopes', async () => {
    const hub = new SubscriberHub();
    const seen: number[] = [];
    hub.subscribe((e) => void seen.push(e.seq), { name: 'fast', capacity: 1 });
    // one synchronous burst (e.g. tool_end + step_end of one commit): 1 about to be delivered, 1 waiting
    hub.offer(env(1));
    hub.offer(env(2));
    await hub.whenIdle();
    expect(hub.takeErrors()).toEqual([]);
    expect(seen).toEqual([1, 2]);
    // the bound still holds: one more than that overflows
    hub.offer(env(3));
    hub.offer(env(4));
    hub.offer(env(5));
    expect(hub.takeErrors()).toMatchObject([{ consumer: 'fast', seq: 5, reason: 'closed' }]);
  });
});
