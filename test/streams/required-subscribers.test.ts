import { join } from 'node:path';
import { Subject } from 'rxjs';
import { SimulatedClock } from 'xstate';
import { afterEach, describe, expect, it } from 'vitest';
import { type Envelope } from '../../src/index.js';
import { SubscriberHub } from '../../src/streams/subscribers.js';
import { killAllChildren, REPO_ROOT, spawnTs } from '../crash/child-util.js';
import { deferred } from '../helpers/drafts.js';
import { env, gatedListener, settle, track } from '../helpers/hub.js';

// Required subscribers of the SubscriberHub: publish waits for room in their queues, and they get
// every envelope (subscribers.test.ts has the options, non-required subscribers and errors).

describe('SubscriberHub: required subscribers', () => {
  it('makes publish wait for room and delivers every envelope in order', async () => {
    const hub = new SubscriberHub();
    const g = gatedListener();
    hub.subscribe(g.listener, { name: 'audit', required: true, capacity: 2 });
    await hub.publish(env(1)); // in flight
    await hub.publish(env(2)); // queued
    await hub.publish(env(3)); // queued: the queue is full
    const p4 = track(hub.publish(env(4)));
    const p5 = track(hub.publish(env(5)));
    await settle();
    expect(p4.done).toBe(false);
    expect(p5.done).toBe(false);
    expect(g.seen).toEqual([1]);

    g.gates[0]!.resolve(); // 2 goes in flight: room for 4
    await settle();
    expect(p4.done).toBe(true);
    expect(p5.done).toBe(false);

    for (let i = 1; i <= 4; i++) {
      g.gates[i]!.resolve();
      await settle();
    }
    expect(p5.done).toBe(true);
    await hub.whenIdle();
    expect(g.seen).toEqual([1, 2, 3, 4, 5]);
    expect(g.maxInFlight()).toBe(1);
    expect(hub.takeErrors()).toEqual([]);
  });

  it('a non-required subscriber keeps receiving while a required one holds publish', async () => {
    const hub = new SubscriberHub();
    const g = gatedListener();
    const other: number[] = [];
    hub.subscribe(g.listener, { required: true, capacity: 1 });
    hub.subscribe((e) => void other.push(e.seq));
    await hub.publish(env(1));
    await hub.publish(env(2));
    const p3 = track(hub.publish(env(3)));
    await settle();
    expect(p3.done).toBe(false);
    expect(other).toEqual([1, 2]);
    g.gates[0]!.resolve();
    await settle();
    expect(p3.done).toBe(true);
    expect(other).toEqual([1, 2, 3]);
  });

  it('reports a throwing or timed-out required listener and keeps delivering to it', async () => {
    const clock = new SimulatedClock();
    const hub = new SubscriberHub({ clock });
    const seen: number[] = [];
    const hang = deferred();
    hub.subscribe(
      (e) => {
        seen.push(e.seq);
        if (e.seq === 1) throw new Error('bad one');
        if (e.seq === 2) return hang.promise;
      },
      { name: 'ledger', required: true, capacity: 8, deliveryTimeoutMs: 100 },
    );
    for (let i = 1; i <= 4; i++) await hub.publish(env(i));
    await settle();
    expect(seen).toEqual([1, 2]);
    clock.increment(99);
    await settle();
    expect(seen).toEqual([1, 2]); // 2 is still being delivered
    clock.increment(1);
    await hub.whenIdle();
    expect(seen).toEqual([1, 2, 3, 4]);
    hang.reject(new Error('too late'));
    await settle();
    expect(hub.size).toBe(1);
    expect(hub.takeErrors().map((e) => [e.consumer, e.seq, e.reason])).toEqual([
      ['ledger', 1, 'error'],
      ['ledger', 2, 'timeout'],
    ]);
  });

  it('unsubscribing a full required subscriber releases a waiting publish', async () => {
    const hub = new SubscriberHub();
    const g = gatedListener();
    const off = hub.subscribe(g.listener, { required: true, capacity: 1 });
    await hub.publish(env(1));
    await hub.publish(env(2));
    const p3 = track(hub.publish(env(3)));
    await settle();
    expect(p3.done).toBe(false);
    off();
    await settle();
    expect(p3.done).toBe(true);
    expect(g.seen).toEqual([1]);
    expect(hub.takeErrors()).toEqual([]);
  });

  it('close releases a waiting publish and drops subscribers silently', async () => {
    const hub = new SubscriberHub();
    const g = gatedListener();
    hub.subscribe(g.listener, { required: true, capacity: 1 });
    await hub.publish(env(1));
    await hub.publish(env(2));
    const p3 = track(hub.publish(env(3)));
    hub.close();
    await settle();
    expect(p3.done).toBe(true);
    expect(hub.size).toBe(0);
    expect(g.seen).toEqual([1]);
    expect(hub.takeErrors()).toEqual([]);
  });

  it('offer from an attached source queues for required subscribers and whenWritable waits for room', async () => {
    const hub = new SubscriberHub();
    const source = new Subject<Envelope>();
    const g = gatedListener();
    hub.subscribe(g.listener, { required: true, capacity: 1 });
    hub.attach(source);
    for (let i = 1; i <= 3; i++) source.next(env(i)); // a synchronous source cannot wait
    const writable = track(hub.whenWritable());
    await settle();
    expect(writable.done).toBe(false);
    for (let i = 0; i < 3; i++) {
      g.gates[i]!.resolve();
      await settle();
    }
    expect(writable.done).toBe(true);
    await hub.whenIdle();
    expect(g.seen).toEqual([1, 2, 3]);
    hub.close();
    source.next(env(4));
    await settle();
    expect(g.seen).toEqual([1, 2, 3]);
  });
});

describe('SubscriberHub: whenRequiredDrained', () => {
  it('whenRequiredDrained waits until required queues are handed to their listeners, not for optional ones', async () => {
    const hub = new SubscriberHub();
    const gate = deferred();
    const stuck = deferred();
    const got: number[] = [];
    hub.subscribe(
      async (e) => {
        got.push(e.seq);
        await gate.promise;
      },
      { required: true },
    );
    hub.subscribe(() => stuck.promise, { name: 'slow-optional', deliveryTimeoutMs: 60_000 });
    hub.offer(env(1));
    hub.offer(env(2));
    let done = false;
    void hub.whenRequiredDrained().then(() => (done = true));
    await settle();
    expect(got).toEqual([1]);
    expect(done).toBe(false);
    gate.resolve();
    await settle();
    expect(got).toEqual([1, 2]);
    expect(done).toBe(true);
    hub.close();
  });
});

describe('a required subscriber that never answers, in a process with nothing else to do', () => {
  afterEach(killAllChildren);

  it('keeps the process up while a run waits for the room its timeouts free: every run settles, the process ends by itself', async () => {
    const child = spawnTs(join(REPO_ROOT, 'test/streams/hung-required-child.ts'), [], { label: 'hung required subscriber' });
    const exit = await child.waitExit(120_000);
    expect(child.lines.filter((l) => l.startsWith('RUN '))).toEqual(['RUN 0 succeeded', 'RUN 1 succeeded', 'RUN 2 succeeded']);
    expect(child.lines).toContain('CLOSED');
    expect(exit.code).toBe(0);
  });
});
