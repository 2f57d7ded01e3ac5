import { createActor, toPromise } from 'xstate';
import { describe, expect, it } from 'vitest';
import { openHeldSessionActor } from '../../src/actors/held-session.js';
import type { ServedSession, WorkerServices } from '../../src/actors/worker-services.js';
import { systemClock } from '../../src/contracts/clock.js';
import { memoryStore } from '../../src/persistence/memory-store.js';

// A held session's open (src/actors/held-session.ts): its writer attached under the lease guard,
// then the claim bound to that writer's epoch, in one actor. The work store is a real one; the
// session is a stand-in whose open is where the lease can be lost.

async function claimed(onOpen: () => void) {
  const store = memoryStore();
  const work = store.work!;
  await work.submit('s', { kind: 'input', inputId: 'i', mode: 'follow_up', message: 'go' });
  expect(await work.claim('w', { limit: 1, leaseMs: 60_000 })).toHaveLength(1);
  const { writerEpoch } = await store.attachWriter('s'); // what the runtime's open does
  const binds: number[] = [];
  const counted = Object.assign(Object.create(Object.getPrototypeOf(work)), work, {
    bind: async (...a: Parameters<typeof work.bind>) => (binds.push(a[2]), work.bind(...a)),
  });
  const session = {
    recovery: { writerEpoch },
    snapshot: () => ({ status: 'idle' }),
    events$: { subscribe: () => ({ unsubscribe() {} }) },
  } as unknown as ServedSession;
  const services = {
    workerId: 'w',
    store,
    work: counted,
    clock: systemClock,
    options: { leaseMs: 60_000 },
    open: async () => (onOpen(), session),
    inboxFor: () => ({ appliedListeners: new Set() }),
    sessions: new Map(),
    watches: new Map(),
  } as unknown as WorkerServices;
  return { services, binds };
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

  it('a lease lost while the session opens is not bound: the store is not asked, the open session is left for the release to close', async () => {
    const lease: { lost?: string } = {};
    const { services, binds } = await claimed(() => (lease.lost = 'not renewed within 300 ms by this worker'));
    const actor = createActor(openHeldSessionActor(services), { input: { heldId: 1, sessionId: 's', holder: holderOf(lease) as never } });
    expect(await toPromise(actor.start())).toMatchObject({ writerEpoch: 1, bound: false });
    expect(binds).toEqual([]);
    expect(services.sessions.size).toBe(1);
  });
});
