import { createActor, toPromise } from 'xstate';
import { describe, expect, it } from 'vitest';
import { openHeldSessionActor } from '../../src/actors/held-session.js';
import type { ServedSession, WorkerServices } from '../../src/actors/worker-services.js';
import { systemClock } from '../../src/contracts/clock.js';
import { memoryStore } from '../../src/persistence/memory-store.js';

// A held session's open (src/actors/held-session.ts): its writer attached under the lease guard,
// then the claim bound to that writer's epoch, then its first pass, in one actor. The work store is a real one; the
// session is a stand-in whose open is where the lease can be lost.

async function claimed(onOpen: () => void, status = 'idle') {
  const store = memoryStore();
  const work = store.work!;
  await work.submit('s', { kind: 'input', inputId: 'i', mode: 'follow_up', message: 'go' });
  expect(await work.claim('w', { limit: 1, leaseMs: 60_000 })).toHaveLength(1);
  const { writerEpoch } = await store.attachWriter('s'); // what the runtime's open does
  const binds: number[] = [];
  const counted = Object.assign(Object.create(Object.getPrototypeOf(work)), work, {
    bind: async (...a: Parameters<typeof work.bind>) => (binds.push(a[2]), work.bind(...a)),
  });
  const drains: string[] = [];
  const session = {
    recovery: { writerEpoch },
    snapshot: () => ({ status }),
    actor: { getSnapshot: () => ({ value: status }) },
    events$: { subscribe: () => ({ unsubscribe() {} }) },
  } as unknown as ServedSession;
  const services = {
    workerId: 'w',
    store,
    work: counted,
    clock: systemClock,
    options: { leaseMs: 60_000 },
    open: async () => (onOpen(), session),
    // the inbox applier: each drain recorded, its entries left in the store (the look counts them)
    inboxFor: () => ({ appliedListeners: new Set(), drain: async () => void drains.push('drain') }),
    sessions: new Map(),
    watches: new Map(),
  } as unknown as WorkerServices;
  return { services, binds, drains };
}

const holderOf = (lease: { lost?: string }) => ({
  getSnapshot: () => ({ context: { lost: lease.lost, deadline: Infinity } }),
  send: () => {},
});

describe('a held session is opened, then its claim bound to the writer epoch', () => {
  it('binds the claim to the epoch its writer attached with, the bind sent after the open', async () => {
    const { services, binds } = await claimed(() => {});
    const before = systemClock.now();
    const actor = createActor(openHeldSessionActor(services), { input: { heldId: 1, sessionId: 's', holder: holderOf({}) as never } });
    const out = await toPromise(actor.start());
    expect(out).toMatchObject({ writerEpoch: 1, interrupted: false, bound: true });
    expect(out.sentAt).toBeGreaterThanOrEqual(before);
    expect(binds).toEqual([1]);
    expect(services.sessions.size).toBe(1);
  });

  it("makes the session's first pass once bound: its inbox drained, then where it stands (here resting, one entry still waiting)", async () => {
    const { services, drains } = await claimed(() => {});
    const actor = createActor(openHeldSessionActor(services), { input: { heldId: 1, sessionId: 's', holder: holderOf({}) as never } });
    expect(await toPromise(actor.start())).toMatchObject({
      bound: true,
      outcome: 'drained',
      look: { phase: 'resting', pending: 1, runOpen: false },
    });
    expect(drains).toEqual(['drain']);
  });

  it('makes no pass when the log has a run to resume first, or the worker stops: the machine decides those after the bind', async () => {
    const detached = await claimed(() => {}, 'detached');
    const resuming = createActor(openHeldSessionActor(detached.services), {
      input: { heldId: 1, sessionId: 's', holder: holderOf({}) as never },
    });
    const out = await toPromise(resuming.start());
    expect(out).toMatchObject({ bound: true, interrupted: true });
    expect(out.outcome).toBeUndefined();
    const stopping = await claimed(() => {});
    const holder = { getSnapshot: () => ({ context: { lost: undefined, deadline: Infinity, stopping: true } }), send: () => {} };
    const stopped = createActor(openHeldSessionActor(stopping.services), { input: { heldId: 1, sessionId: 's', holder: holder as never } });
    expect((await toPromise(stopped.start())).outcome).toBeUndefined();
    expect([...detached.drains, ...stopping.drains]).toEqual([]);
  });

  it('a lease lost while the session opens is not bound: the store is not asked, the open session is left for the release to close', async () => {
    const lease: { lost?: string } = {};
    const { services, binds, drains } = await claimed(() => (lease.lost = 'not renewed within 300 ms by this worker'));
    const actor = createActor(openHeldSessionActor(services), { input: { heldId: 1, sessionId: 's', holder: holderOf(lease) as never } });
    expect(await toPromise(actor.start())).toMatchObject({ writerEpoch: 1, bound: false });
    expect(binds).toEqual([]);
    expect(drains).toEqual([]);
    expect(services.sessions.size).toBe(1);
  });
});
