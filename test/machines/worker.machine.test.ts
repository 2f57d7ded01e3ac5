import { createActor, fromCallback, fromPromise, SimulatedClock, type AnyActorLogic } from 'xstate';
import { describe, expect, it } from 'vitest';
import { clockTimerActor } from '../../src/actors/clock-timer.js';
import type { ServeEvent } from '../../src/contracts/inbox.js';
import { heldSessionMachine } from '../../src/machines/held-session.machine.js';
import { workerMachine } from '../../src/machines/worker.machine.js';

// The worker machine through `.provide()` with fake effects, on XState's SimulatedClock: every
// poll, renewal and deadline moves only when the test moves the clock.

const settle = async () => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
};

/** A fake effect: the machine's actor types are checked by src/runtime/worker-actors.ts, not here. */
const fake = (fn: (args: { input: any }) => Promise<unknown>): AnyActorLogic => fromPromise(fn) as AnyActorLogic;

interface Fakes {
  claims: string[][];
  renewals: string[][] | 'keep';
  calls: string[];
  rests?: boolean;
}

function start(clock: SimulatedClock, fakes: Fakes, leaseMs = 3000) {
  const calls = fakes.calls;
  const held = heldSessionMachine.provide({
    actors: {
      previousEnded: fake(async () => {}),
      openSession: fake(async ({ input }) => (calls.push(`open ${input.sessionId}`), { writerEpoch: 7 })),
      bindLease: fake(async () => ({ bound: true, sentAt: clock.now() })),
      resumeRun: fake(async () => null),
      watchSession: fromCallback(() => {}),
      drainInbox: fake(async () => ({ outcome: 'drained' as const })),
      lookAtSession: fake(async () => (fakes.rests ? { phase: 'resting' as const, pending: 0 } : { phase: 'busy' as const })),
      sessionIdle: fake(() => new Promise<void>(() => {})),
      timer: clockTimerActor(clock),
      shutdownSession: fake(async () => ({ resume: false })),
      closeSession: fake(async ({ input }) => (calls.push(`close ${input.heldId}`), { detached: false })),
      releaseLease: fake(async ({ input }) => void calls.push(`release ${input.sessionId} ${input.writerEpoch}`)),
    },
  });
  const worker = workerMachine.provide({
    actors: {
      heldSession: held,
      wakeups: fromCallback(() => {}),
      registerWorker: fake(async () => void calls.push('register')),
      claimSessions: fake(async () => {
        calls.push(`claim @${clock.now()}`);
        return { claimed: (fakes.claims.shift() ?? []).map((sessionId) => ({ sessionId, expired: false })), sentAt: clock.now() };
      }),
      renewLeases: fake(async ({ input }: { input: { bound: { heldId: number; sessionId: string; writerEpoch: number }[] } }) => {
        calls.push(`renew ${input.bound.map((b) => `${b.sessionId}@${b.writerEpoch}`).join(',')} @${clock.now()}`);
        const kept = fakes.renewals === 'keep' ? input.bound.map((b) => b.sessionId) : (fakes.renewals.shift() ?? []);
        return { ok: true as const, sentAt: clock.now(), kept, bound: input.bound };
      }),
      unregisterWorker: fake(async () => void calls.push('unregister')),
      timer: clockTimerActor(clock),
    },
  });
  const events: ServeEvent[] = [];
  const actor = createActor(worker, {
    clock,
    input: {
      workerId: 'w',
      concurrency: 2,
      leaseMs,
      pollMs: 1000,
      heldPollMs: 1000,
      idleReleaseMs: 0,
      shutdownGraceMs: 0,
      startedAt: clock.now(),
    },
  });
  actor.on('*', (e) => events.push(e as ServeEvent));
  actor.start();
  return { actor, events };
}

describe('the worker machine', () => {
  it("claims on its clock's poll: nothing more until pollMs has passed on the clock", async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    start(clock, { claims: [], renewals: 'keep', calls });
    await settle();
    expect(calls).toEqual(['register', 'claim @0']);
    clock.increment(999);
    await settle();
    expect(calls.filter((c) => c.startsWith('claim'))).toHaveLength(1);
    clock.increment(1);
    await settle();
    expect(calls.filter((c) => c.startsWith('claim'))).toEqual(['claim @0', 'claim @1000']);
  });

  it('renews a bound lease with its epoch every third of the lease; a lease the store does not renew is lost, closed and not released', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const { actor, events } = start(clock, { claims: [['s']], renewals: [['s']], calls });
    await settle();
    expect(events.map((e) => e.type)).toEqual(['started', 'claimed', 'attached']);
    clock.increment(1000);
    await settle();
    expect(calls).toContain('renew s@7 @1000');
    clock.increment(1000);
    await settle();
    expect(events.find((e) => e.type === 'lease_lost')).toMatchObject({ sessionId: 's', reason: expect.stringContaining('did not renew') });
    expect(calls).toContain('close 1');
    expect(calls.some((c) => c.startsWith('release'))).toBe(false);
    expect(actor.getSnapshot().context.held).toEqual([]);
  });

  it('a session resting with nothing waiting is closed and released with the epoch its lease was bound to; a stop unregisters the worker', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const { actor, events } = start(clock, { claims: [['s']], renewals: 'keep', calls, rests: true });
    await settle();
    expect(events.map((e) => e.type)).toEqual(['started', 'claimed', 'attached', 'released']);
    expect(calls).toEqual(['register', 'claim @0', 'open s', 'close 1', 'release s 7', 'claim @0']);
    actor.send({ type: 'STOP' });
    await settle();
    expect(events.map((e) => e.type).slice(-2)).toEqual(['stopping', 'stopped']);
    expect(calls.at(-1)).toBe('unregister');
    expect(actor.getSnapshot().status).toBe('done');
  });
});
