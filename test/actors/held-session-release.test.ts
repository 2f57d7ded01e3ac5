import { createActor, toPromise } from 'xstate';
import { describe, expect, it } from 'vitest';
import { releaseSessionActor } from '../../src/actors/held-session.js';
import type { ServedSession, WorkerServices } from '../../src/actors/worker-services.js';
import { memoryStore } from '../../src/persistence/memory-store.js';

// A held session's end (src/actors/held-session.ts): closed, then its lease given up — unless the
// lease was lost while it closed. The work store is a real one; the session is a stand-in whose
// close is where the loss happens; whether a run is left open is read from the store's log.

/** A worker's services holding one session (heldId 1) on a memory store whose releases are counted. */
async function holding(onClose: () => void, status = 'idle', runOpen = false) {
  const store = memoryStore();
  const work = store.work!;
  await work.submit('s', { kind: 'input', inputId: 'i', mode: 'follow_up', message: 'go' });
  expect(await work.claim('w', { limit: 1, leaseMs: 60_000 })).toHaveLength(1);
  const { writerEpoch } = await store.attachWriter('s'); // the held session's open
  expect(writerEpoch).toBe(1);
  expect(await work.bind('s', 'w', writerEpoch, 60_000)).toBe(true);
  if (runOpen) await store.append('s', writerEpoch, 1, [runStart]);
  const releases: string[] = [];
  const counted = Object.assign(Object.create(Object.getPrototypeOf(work)), work, {
    release: async (...a: Parameters<typeof work.release>) => {
      releases.push(`${a[0]}@${a[2]} resume=${a[3].resume}`);
      return work.release(...a);
    },
  });
  const session = {
    snapshot: () => ({ status }),
    actor: { getSnapshot: () => ({ value: status }) },
    close: async () => onClose(),
  } as unknown as ServedSession;
  const services = {
    workerId: 'w',
    store,
    work: counted,
    sessions: new Map([[1, session]]),
    watches: new Map(),
  } as unknown as WorkerServices;
  return { services, releases, work };
}

/** A run's first attempt started, never ended: the log has the run open. */
const runStart = {
  type: 'run/start' as const,
  turn: 1,
  step: 0,
  attempt: 1,
  surfaceOp: 'none' as const,
  payload: { runId: 'r', attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f' },
};

const holderOf = (lease: { lost?: string }) => ({ getSnapshot: () => ({ context: { lost: lease.lost, deadline: Infinity } }) });

describe('a held session is released after its close', () => {
  it('a lease lost while the session closes is not released: the close is the last await before the release', async () => {
    const lease: { lost?: string } = {};
    const { services, releases, work } = await holding(() => (lease.lost = 'not renewed within 300 ms by this worker'));
    const actor = createActor(releaseSessionActor(services), {
      input: { heldId: 1, sessionId: 's', writerEpoch: 1, holder: holderOf(lease) as never, rested: false },
    }).start();
    expect(await toPromise(actor)).toEqual({ released: false, resume: false });
    expect(releases).toEqual([]);
    expect(services.sessions.size).toBe(0);
    // the lease is still in the store, to expire there: no other worker can claim the session yet
    expect(await work.claim('w2', { limit: 1, leaseMs: 60_000 })).toEqual([]);
  });

  it('a session whose log has a run left open is released with the resume mark, whatever its status says at the close', async () => {
    // runtime.close() closed it under the worker: its status reads `closed`, not `detached`
    const { services, releases, work } = await holding(() => {}, 'closed', true);
    const actor = createActor(releaseSessionActor(services), {
      input: { heldId: 1, sessionId: 's', writerEpoch: 1, holder: holderOf({}) as never, rested: false },
    }).start();
    expect(await toPromise(actor)).toEqual({ released: true, resume: true });
    expect(releases).toEqual(['s@1 resume=true']);
    expect(await work.claim('w2', { limit: 1, leaseMs: 60_000 })).toMatchObject([{ sessionId: 's' }]);
  });

  it('a release after a look found the session resting with no run open does not read the log: released without the resume mark', async () => {
    const { services, releases } = await holding(() => {}, 'idle');
    let reads = 0;
    const store = services.store;
    const counted = Object.assign(Object.create(Object.getPrototypeOf(store)), store, {
      getHead: async (id: string) => (reads++, store.getHead(id)),
      readEvents: (id: string, o: never) => (reads++, store.readEvents(id, o)),
    });
    const actor = createActor(releaseSessionActor({ ...services, store: counted } as WorkerServices), {
      input: { heldId: 1, sessionId: 's', writerEpoch: 1, holder: holderOf({}) as never, rested: true },
    }).start();
    expect(await toPromise(actor)).toEqual({ released: true, resume: false });
    expect(releases).toEqual(['s@1 resume=false']);
    expect(reads).toBe(0);
  });

  it('a release asked as rested reads the log all the same when the session no longer rests so at the close (a run started after the look, left open)', async () => {
    const { services, releases } = await holding(() => {}, 'detached', true);
    const actor = createActor(releaseSessionActor(services), {
      input: { heldId: 1, sessionId: 's', writerEpoch: 1, holder: holderOf({}) as never, rested: true },
    }).start();
    expect(await toPromise(actor)).toEqual({ released: true, resume: true });
    expect(releases).toEqual(['s@1 resume=true']);
  });

  it('a session whose log has no run open is released without the resume mark', async () => {
    const { services, releases } = await holding(() => {}, 'detached');
    const actor = createActor(releaseSessionActor(services), {
      input: { heldId: 1, sessionId: 's', writerEpoch: 1, holder: holderOf({}) as never, rested: false },
    }).start();
    expect(await toPromise(actor)).toEqual({ released: true, resume: false });
    expect(releases).toEqual(['s@1 resume=false']);
  });
});
