import { afterEach } from 'vitest';
import { createRuntime, lmdbStore, memoryStore, type EventStore, type Runtime, type RuntimeOptions } from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { collect, deferred } from './drafts.js';
import { tempDir } from './tmp.js';

/** An EventStore passing everything to `inner` but `append` (to watch, delay or alter what is written). */
export function storeWithAppend(inner: EventStore, append: EventStore['append']): EventStore {
  return {
    attachWriter: (id) => inner.attachWriter(id),
    append,
    readEvents: (id, r) => inner.readEvents(id, r),
    loadSurface: (id) => inner.loadSurface(id),
    ...(inner.loadStoredSurface ? { loadStoredSurface: (id: string) => inner.loadStoredSurface!(id) } : {}),
    getHead: (id) => inner.getHead(id),
    getEventById: (id, e) => inner.getEventById(id, e),
    listSessions: () => inner.listSessions(),
    events$: (id, o) => inner.events$(id, o),
    close: () => inner.close(),
  };
}

/**
 * `inner` whose append of a batch holding a `type` draft (to `sessionId` only, if given) waits until
 * `release` resolves; `landing` resolves as it starts to wait (to act while that commit is under way).
 */
export function holdingAppendOf(inner: EventStore, type: string, sessionId?: string) {
  const landing = deferred();
  const release = deferred();
  const store = storeWithAppend(inner, async (id, epoch, seq, drafts) => {
    if ((sessionId === undefined || id === sessionId) && drafts.some((d) => d.type === type)) {
      landing.resolve();
      await release.promise;
    }
    return inner.append(id, epoch, seq, drafts);
  });
  return { store, landing, release };
}

/** An EventStore wrapper counting appends (commit points). */
export function countingStore(inner: EventStore): EventStore & { appends: number } {
  const s = Object.assign(
    storeWithAppend(inner, (...args) => {
      s.appends++;
      return inner.append(...args);
    }),
    { appends: 0 },
  );
  return s;
}

const open: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of open.splice(0)) await c();
});

/** A runtime on a fresh real LMDB file in a temp dir, closed and removed after the test. */
export function lmdbRuntime(options: Omit<RuntimeOptions, 'store'>): {
  runtime: Runtime;
  store: EventStore & { appends: number };
  path: string;
} {
  const dir = tempDir();
  const store = countingStore(lmdbStore({ path: dir.path }));
  const runtime = createRuntime({ ...options, store });
  open.push(async () => {
    await runtime.close();
    await dir.cleanup();
  });
  return { runtime, store, path: dir.path };
}

/** A runtime on a fresh memoryStore (or `store`), closed after the test. */
export function memRuntime(
  options: Omit<RuntimeOptions, 'store'>,
  store: EventStore = memoryStore(),
): { runtime: Runtime; store: EventStore } {
  const runtime = createRuntime({ ...options, store });
  open.push(() => runtime.close().catch(() => undefined));
  return { runtime, store };
}

export async function logOf(store: EventStore, sessionId: string): Promise<EventRecord[]> {
  return collect(store.readEvents(sessionId));
}

export const typesOf = (events: EventRecord[]) => events.map((e) => e.type);

/** The records of `type` about tool call `callId`. */
export const ofCall = (log: EventRecord[], type: string, callId: string) =>
  log.filter((e) => e.type === type && e.payload.callId === callId);

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resolves with `p`, or with 'still pending' after `ms`. */
export const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => 'still pending' as const)]);

/** The statuses of a settled run (every run/end status but suspended, detached and interrupted). */
export const SETTLED = new Set(['succeeded', 'cancelled', 'stopped', 'budget_exhausted', 'blocked', 'failed', 'delivery_unknown']);

let n = 0;
export const ids = () => {
  n++;
  return { runId: `run-${n}`, attemptId: `att-${n}` };
};
