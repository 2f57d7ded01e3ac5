import type { EventStore, ExecutionSession } from '../../src/index.js';
import { sleep } from './runtime.js';

/** The counters of a store wrapper whose next append / read can be made to fail once (a transient error). */
export interface Flaky {
  failAppendIn: number; // fail the n-th append from now (0 = off)
  failReadIn: number; // fail the n-th getHead/getEventById from now (0 = off)
  appendFailures: number;
  readFailures: number;
}

export function flakyStore(inner: EventStore, f: Flaky): EventStore {
  return {
    attachWriter: (id) => inner.attachWriter(id),
    append: async (...args) => {
      if (f.failAppendIn > 0 && --f.failAppendIn === 0) {
        f.appendFailures++;
        throw new Error('transient: append failed (injected)');
      }
      return inner.append(...args);
    },
    readEvents: (id, r) => inner.readEvents(id, r),
    loadSurface: (id) => inner.loadSurface(id),
    ...(inner.loadStoredSurface ? { loadStoredSurface: (id: string) => inner.loadStoredSurface!(id) } : {}),
    getHead: async (id) => {
      if (f.failReadIn > 0 && --f.failReadIn === 0) {
        f.readFailures++;
        throw new Error('transient: getHead failed (injected)');
      }
      return inner.getHead(id);
    },
    getEventById: async (id, e) => {
      if (f.failReadIn > 0 && --f.failReadIn === 0) {
        f.readFailures++;
        throw new Error('transient: getEventById failed (injected)');
      }
      return inner.getEventById(id, e);
    },
    listSessions: () => inner.listSessions(),
    events$: (id, o) => inner.events$(id, o),
    close: () => inner.close(),
  };
}

/** A store that sends a stop for r1 (key 'k') just as an attempt writes its run/end with `status`. */
export function stopAtRunEnd(
  inner: EventStore,
  status: string,
  session: () => ExecutionSession,
): { store: EventStore; stop: () => Promise<unknown> | undefined } {
  let stop: Promise<unknown> | undefined;
  const store: EventStore = {
    ...flakyStore(inner, { failAppendIn: 0, failReadIn: 0, appendFailures: 0, readFailures: 0 }),
    append: async (id, ep, seq, drafts) => {
      if (!stop && drafts.some((d) => d.type === 'run/end' && (d.payload as { status?: string }).status === status)) {
        const s = session();
        stop = s.stopAfterCurrentToolRound({
          sessionId: 's',
          sessionInstanceId: s.sessionInstanceId,
          interactionId: 'r1',
          expectedRunEpoch: 1,
          idempotencyKey: 'k',
        });
        await sleep(20);
      }
      return inner.append(id, ep, seq, drafts);
    },
  };
  return { store, stop: () => stop };
}
