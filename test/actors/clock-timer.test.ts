import { createActor, setup, SimulatedClock } from 'xstate';
import { describe, expect, it } from 'vitest';
import { clockTimerActor } from '../../src/actors/clock-timer.js';
import type { Clock } from '../../src/contracts/clock.js';

/** A SimulatedClock that counts the timeouts set and not yet fired or cleared. */
function countingClock() {
  const clock = new SimulatedClock();
  const live = new Set<unknown>();
  const counted: Clock & { live: Set<unknown>; increment(ms: number): void } = {
    live,
    now: () => clock.now(),
    setTimeout: (fn, ms) => {
      const id = clock.setTimeout(() => (live.delete(id), fn()), ms);
      live.add(id);
      return id;
    },
    clearTimeout: (id) => (live.delete(id), clock.clearTimeout(id as number)),
    increment: (ms) => clock.increment(ms),
  };
  return counted;
}

const settle = () => new Promise((r) => setImmediate(r));

function waiter(clock: Clock, input: { ms?: number; at?: number }) {
  const machine = setup({ actors: { timer: clockTimerActor(clock) } }).createMachine({
    initial: 'waiting',
    states: {
      waiting: { invoke: { src: 'timer', input, onDone: 'done' }, on: { LEAVE: 'left' } },
      done: {},
      left: {},
    },
  });
  return createActor(machine).start();
}

describe('clockTimerActor', () => {
  it('is done once the clock has moved `ms`, or reads `at`, and not before', async () => {
    const clock = countingClock();
    const after = waiter(clock, { ms: 100 });
    const at = waiter(clock, { at: clock.now() + 250 });
    clock.increment(99);
    await settle();
    expect([after.getSnapshot().value, at.getSnapshot().value]).toEqual(['waiting', 'waiting']);
    clock.increment(1);
    await settle();
    expect([after.getSnapshot().value, at.getSnapshot().value]).toEqual(['done', 'waiting']);
    clock.increment(150);
    await settle();
    expect(at.getSnapshot().value).toBe('done');
    expect(clock.live.size).toBe(0);
  });

  it('clears its timeout on the clock when the state that invoked it is left first', async () => {
    const clock = countingClock();
    const actor = waiter(clock, { ms: 1000 });
    expect(clock.live.size).toBe(1);
    actor.send({ type: 'LEAVE' });
    expect(clock.live.size).toBe(0);
    clock.increment(2000);
    await settle();
    expect(actor.getSnapshot().value).toBe('left');
  });

  it('waits forever with neither `ms` nor `at`, setting no timeout', async () => {
    const clock = countingClock();
    const actor = waiter(clock, {});
    clock.increment(1e9);
    await settle();
    expect(actor.getSnapshot().value).toBe('waiting');
    expect(clock.live.size).toBe(0);
  });
});
