import { createActor, fromCallback, fromPromise, SimulatedClock, type AnyActorLogic, type AnyActorRef, type InspectionEvent } from 'xstate';
import { describe, expect, it } from 'vitest';
import { clockTimerActor } from '../../src/actors/clock-timer.js';
import type { ServeEvent } from '../../src/contracts/inbox.js';
import { heldSessionMachine } from '../../src/machines/held-session.machine.js';
import { workerMachine } from '../../src/machines/worker.machine.js';

// The worker machine through `.provide()` with fake effects, on XState's SimulatedClock: every
// poll, renewal and deadline moves only when the test moves the clock.

/** Lets every effect answer; the clock moves 0 ms each time (the claims' `gathering` waits out a turn on it). */
const settle = async (clock: SimulatedClock) => {
  for (let i = 0; i < 20; i++) {
    clock.increment(0);
    await new Promise((r) => setImmediate(r));
  }
};

/** A fake effect: the machine's actor types are checked by src/runtime/worker-actors.ts, not here. */
const fake = (fn: (args: { input: any }) => Promise<unknown>): AnyActorLogic => fromPromise(fn) as AnyActorLogic;

interface Fakes {
  claims: string[][];
  renewals: string[][] | 'keep';
  calls: string[];
  /** Whether a held session (by its heldId) rests with nothing waiting when it looks: it is then released. */
  rests?: boolean | ((heldId: number) => boolean);
  claimSessions?: AnyActorLogic;
  /** Guards of the held sessions' machine replaced (one that throws fails the held session). */
  heldGuards?: Record<string, () => boolean>;
  registerWorker?: AnyActorLogic;
  /** What a resting look says of its run: `detached` (a run left open, resting on nothing) or not. */
  restingDetached?: boolean;
  /** The open's first pass waits for this (a test acts while the open is under way). */
  firstPass?: Promise<void>;
  /** The open's first pass finds the writer fenced (another writer attached). */
  firstPassFenced?: boolean;
  /** The store refuses to bind a claim to its writer epoch (the open's bind answers false). */
  bindRefused?: boolean;
  /** Each release's `rested` input (whether the release may skip reading the log), in order. */
  rested?: boolean[];
}

function start(clock: SimulatedClock, fakes: Fakes, leaseMs = 3000, concurrency = 2, inspect?: (e: InspectionEvent) => void) {
  const calls = fakes.calls;
  const rests = (heldId: number) => (typeof fakes.rests === 'function' ? fakes.rests(heldId) : fakes.rests);
  const look = (heldId: number) =>
    rests(heldId) ? { phase: 'resting' as const, pending: 0, runOpen: fakes.restingDetached === true } : { phase: 'busy' as const };
  const held = heldSessionMachine.provide({
    actors: {
      previousEnded: fake(async () => {}),
      // the open binds, then makes the first pass (as the real one does when bound and not stopping)
      openSession: fake(async ({ input }) => {
        calls.push(`open ${input.sessionId}`);
        const opened = { writerEpoch: 7, interrupted: false, bound: !fakes.bindRefused, sentAt: clock.now() };
        if (opened.bound) input.holder.send({ type: 'LEASE_BOUND', writerEpoch: 7, sentAt: opened.sentAt });
        if (!opened.bound || input.holder.getSnapshot().context.stopping) return opened;
        await fakes.firstPass; // the pass under way (a stop now does not cut it)
        return fakes.firstPassFenced ? { ...opened, outcome: 'fenced' } : { ...opened, outcome: 'drained', look: look(input.heldId) };
      }),
      resumeRun: fake(async () => null),
      drainInbox: fake(async ({ input }) => ({ outcome: 'drained' as const, look: look(input.heldId) })),
      lookAtSession: fake(async ({ input }) => look(input.heldId)),
      sessionIdle: clockTimerActor(clock),
      timer: clockTimerActor(clock),
      shutdownSession: fake(async () => {}),
      closeSession: fake(async ({ input }) => void calls.push(`close ${input.heldId}`)),
      releaseSession: fake(async ({ input }) => {
        fakes.rested?.push(input.rested);
        calls.push(`close ${input.heldId}`);
        if (input.holder.getSnapshot().context.lost !== undefined) return { released: false, resume: false };
        calls.push(`release ${input.sessionId} ${input.writerEpoch}`);
        return { released: true, resume: false };
      }),
      releaseLease: fake(async ({ input }) => (calls.push(`release ${input.sessionId} ${input.writerEpoch}`), { resume: false })),
    },
    ...(fakes.heldGuards ? { guards: fakes.heldGuards } : {}),
  });
  const worker = workerMachine.provide({
    actors: {
      heldSession: held,
      wakeups: fromCallback(() => {}),
      registerWorker: fakes.registerWorker ?? fake(async () => void calls.push('register')),
      claimSessions:
        fakes.claimSessions ??
        fake(async ({ input }) => {
          calls.push(`claim @${clock.now()}`);
          const claimed = (fakes.claims.shift() ?? []).map((sessionId) => ({ sessionId, expired: false }));
          return { claimed, sentAt: clock.now(), limit: input.limit };
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
    ...(inspect ? { inspect } : {}),
    input: {
      workerId: 'w',
      concurrency,
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
    await settle(clock);
    expect(calls).toEqual(['register', 'claim @0']);
    clock.increment(999);
    await settle(clock);
    expect(calls.filter((c) => c.startsWith('claim'))).toHaveLength(1);
    clock.increment(1);
    await settle(clock);
    expect(calls.filter((c) => c.startsWith('claim'))).toEqual(['claim @0', 'claim @1000']);
  });

  it('renews a bound lease with its epoch every third of the lease; a lease the store does not renew is lost, closed and not released', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const { actor, events } = start(clock, { claims: [['s']], renewals: [['s']], calls });
    await settle(clock);
    expect(events.map((e) => e.type)).toEqual(['started', 'claimed', 'attached']);
    clock.increment(1000);
    await settle(clock);
    expect(calls).toContain('renew s@7 @1000');
    clock.increment(1000);
    await settle(clock);
    expect(events.find((e) => e.type === 'lease_lost')).toMatchObject({ sessionId: 's', reason: expect.stringContaining('did not renew') });
    expect(calls).toContain('close 1');
    expect(calls.some((c) => c.startsWith('release'))).toBe(false);
    expect(actor.getSnapshot().context.held).toEqual([]);
  });

  it("a lease is bound and renewed from its bind on, while the open's first pass is still under way; a stop then does not hide what the pass found (fenced: closed, not released)", async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    let pass!: () => void;
    const firstPass = new Promise<void>((r) => (pass = r));
    const { actor, events } = start(clock, { claims: [['s']], renewals: 'keep', calls, firstPass, firstPassFenced: true });
    await settle(clock);
    expect(events.map((e) => e.type)).toEqual(['started', 'claimed', 'attached']);
    clock.increment(1000);
    await settle(clock);
    expect(calls).toContain('renew s@7 @1000');
    actor.send({ type: 'STOP' });
    await settle(clock);
    pass();
    await settle(clock);
    expect(events.map((e) => e.type)).toContain('fenced');
    expect(events.some((e) => e.type === 'released')).toBe(false);
    expect(calls.filter((c) => c.startsWith('release'))).toEqual([]);
  });

  it('a claim the store will not bind to the writer epoch is reported lost, closed and not released', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const { actor, events } = start(clock, { claims: [['s']], renewals: 'keep', calls, bindRefused: true });
    await settle(clock);
    expect(events.map((e) => e.type)).toEqual(['started', 'claimed', 'lease_lost']);
    expect(events[2]).toMatchObject({ sessionId: 's', reason: 'the claim was lost before it was bound to the writer epoch' });
    expect(calls).toEqual(['register', 'claim @0', 'open s', 'close 1', 'claim @0']);
    expect(actor.getSnapshot().context.held).toEqual([]);
  });

  it('a session resting with nothing waiting is closed and released with the epoch its lease was bound to; a stop unregisters the worker', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const { actor, events } = start(clock, { claims: [['s']], renewals: 'keep', calls, rests: true });
    await settle(clock);
    expect(events.map((e) => e.type)).toEqual(['started', 'claimed', 'attached', 'released']);
    expect(calls).toEqual(['register', 'claim @0', 'open s', 'close 1', 'release s 7', 'claim @0']);
    actor.send({ type: 'STOP' });
    await settle(clock);
    expect(events.map((e) => e.type).slice(-2)).toEqual(['stopping', 'stopped']);
    expect(calls.at(-1)).toBe('unregister');
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('a release after a look that found the session resting, nothing waiting and no run open skips reading the log; any other release reads it', async () => {
    const clock = new SimulatedClock();
    const rested: boolean[] = [];
    start(clock, { claims: [['s']], renewals: 'keep', calls: [], rests: true, rested });
    await settle(clock);
    // resting with a run left open (status `detached`): the release reads the log for its resume mark
    const detached: boolean[] = [];
    start(clock, { claims: [['t']], renewals: 'keep', calls: [], rests: true, restingDetached: true, rested: detached });
    await settle(clock);
    // a lease lost (not a look): the release reads it too
    const lost: boolean[] = [];
    start(clock, { claims: [['u']], renewals: [['x']], calls: [], rested: lost });
    await settle(clock);
    clock.increment(1000);
    await settle(clock);
    expect({ rested, detached, lost }).toEqual({ rested: [true], detached: [false], lost: [false] });
  });

  it('a claim that comes back full is followed by another, for the room sessions ending meanwhile freed', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    let gate!: () => void;
    const gated = new Promise<void>((r) => (gate = r));
    let n = 0;
    // each claim hands over as many sessions as it asks for; the second one answers only when let go
    const claimSessions = fake(async ({ input }) => {
      const call = ++n;
      calls.push(`claim ${input.limit} @${clock.now()}`);
      if (call === 2) await gated;
      const claimed = Array.from({ length: input.limit }, (_, i) => ({ sessionId: `c${call}-${i}`, expired: false }));
      return { claimed, sentAt: clock.now(), limit: input.limit };
    });
    const resting = new Set<number>();
    const { actor } = start(clock, { claims: [], renewals: 'keep', calls, claimSessions, rests: (heldId) => resting.has(heldId) });
    await settle(clock);
    expect(calls.filter((c) => c.startsWith('claim'))).toEqual(['claim 2 @0']);
    // the first session rests (woken, it finds nothing waiting): released, its room claimed for
    resting.add(1);
    actor.send({ type: 'WAKE', sessionId: 'c1-0' });
    await settle(clock);
    expect(calls.filter((c) => c.startsWith('claim'))).toEqual(['claim 2 @0', 'claim 1 @0']);
    // the second ends while that claim is under way
    resting.add(2);
    actor.send({ type: 'WAKE', sessionId: 'c1-1' });
    await settle(clock);
    expect(actor.getSnapshot().context.held).toEqual([]);
    gate();
    await settle(clock);
    expect(calls.filter((c) => c.startsWith('claim'))).toEqual(['claim 2 @0', 'claim 1 @0', 'claim 1 @0']);
    expect(actor.getSnapshot().context.held.map((h) => h.sessionId)).toEqual(['c2-0', 'c3-0']);
  });

  it('sessions ending in the same turn make room for one claim', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    let n = 0;
    const claimSessions = fake(async ({ input }) => {
      calls.push(`claim ${input.limit}`);
      const claimed = ++n === 1 ? [0, 1].map((i) => ({ sessionId: `s${i}`, expired: false })) : [];
      return { claimed, sentAt: clock.now(), limit: input.limit };
    });
    // both sessions of the first claim rest at once: released together
    start(clock, { claims: [], renewals: 'keep', calls, claimSessions, rests: true });
    await settle(clock);
    expect(calls.filter((c) => c.startsWith('claim'))).toEqual(['claim 2', 'claim 2']);
  });

  it("reuses its held sessions' actor ids: serving many sessions one after another makes no more ids than it held at once", async () => {
    // a child's end reaches the worker as `xstate.done.actor.<id>`, which XState memoizes per event
    // type for the machine's life: an id per session would grow that memo with every session served
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const claims = Array.from({ length: 30 }, (_, i) => [`a${i}`, `b${i}`]);
    const ids = new Set<string>();
    const { events } = start(clock, { claims, renewals: 'keep', calls, rests: true }, 3000, 2, (e) => {
      const id = e.type === '@xstate.actor' ? (e.actorRef as AnyActorRef).id : '';
      if (id.startsWith('held-')) ids.add(id);
    });
    for (let i = 0; i < 10; i++) await settle(clock);
    expect(events.filter((e) => e.type === 'released')).toHaveLength(60);
    expect([...ids].sort()).toEqual(['held-0', 'held-1']);
  });

  it('a held session that fails is reported, dropped, and its room claimed again', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const heldGuards = {
      bound: () => {
        throw new Error('a guard went wrong');
      },
    };
    const { actor, events } = start(clock, { claims: [['s'], ['t']], renewals: 'keep', calls, rests: true, heldGuards });
    await settle(clock);
    const errors = events.filter((e) => e.type === 'error');
    expect(errors[0]).toMatchObject({ message: expect.stringContaining('a held session failed') });
    expect(calls.filter((c) => c.startsWith('claim'))).toHaveLength(3);
    expect(calls).toContain('open t');
    expect(actor.getSnapshot().context.held).toEqual([]);
  });

  it('a worker whose registration fails reports why and stops: it never reports started, and claims nothing', async () => {
    const clock = new SimulatedClock();
    const calls: string[] = [];
    const registerWorker = fake(async () => {
      throw new Error('the store is closed');
    });
    const { actor, events } = start(clock, { claims: [['s']], renewals: 'keep', calls, registerWorker });
    await settle(clock);
    expect(events.map((e) => e.type)).toEqual(['error', 'stopped']);
    expect(events[0]).toMatchObject({ message: 'registering the worker failed: the store is closed; the worker stops' });
    expect(calls).toEqual([]);
    expect(actor.getSnapshot().status).toBe('done');
  });
});
