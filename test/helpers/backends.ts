import { afterEach } from 'vitest';
import { createRuntime, lmdbStore, memoryStore, type EventStore, type Runtime, type RuntimeOptions } from '../../src/index.js';
import { tempDir } from './tmp.js';

/**
 * Both stores, each able to "reopen" what it holds: the memory store hands out the same instance,
 * LMDB a new store on the same path (as a restarted process would). Runtimes made with `rt` are
 * closed after the test unless `abandon`ed (a stand-in for a crash: the log ends where it stands).
 */
export interface Backend {
  name: 'memory' | 'lmdb';
  rt(options: Omit<RuntimeOptions, 'store'>): Runtime;
  /** The runtime is never closed: its log ends exactly where a killed process's would. */
  abandon(runtime: Runtime): void;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function backend(name: Backend['name'], open: () => EventStore, cleanup: () => Promise<void>): Backend {
  const live = new Set<Runtime>();
  cleanups.push(async () => {
    for (const r of live) await r.close().catch(() => undefined);
    await cleanup();
  });
  return {
    name,
    rt(options) {
      const r = createRuntime({ ...options, store: open() });
      live.add(r);
      return r;
    },
    abandon: (r) => void live.delete(r),
  };
}

export const backends: Record<Backend['name'], () => Backend> = {
  memory: () => {
    const store = memoryStore();
    // a runtime's close closes its store: the memory store is shared, so only the last may
    const shared = unclosable(store);
    return backend(
      'memory',
      () => shared,
      () => store.close(),
    );
  },
  lmdb: () => {
    const dir = tempDir();
    return backend(
      'lmdb',
      () => lmdbStore({ path: dir.path }),
      () => dir.cleanup(),
    );
  },
};

/** `s` with a close that does nothing: runtimes sharing one memory store, one after another. */
export const unclosable = (s: EventStore): EventStore => ({ ...bind(s), close: async () => {} });

function bind(s: EventStore): EventStore {
  return {
    attachWriter: (id) => s.attachWriter(id),
    append: (id, epoch, seq, drafts) => s.append(id, epoch, seq, drafts),
    readEvents: (id, r) => s.readEvents(id, r),
    loadSurface: (id) => s.loadSurface(id),
    ...(s.loadStoredSurface ? { loadStoredSurface: (id: string) => s.loadStoredSurface!(id) } : {}),
    getHead: (id) => s.getHead(id),
    getEventById: (id, e) => s.getEventById(id, e),
    listSessions: () => s.listSessions(),
    events$: (id, o) => s.events$(id, o),
    close: () => s.close(),
  };
}

/** The property names a plain object answers from its prototype (or, for `__proto__`, re-links). */
export const PROTO_KEYS = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf'] as const;

/** Resolves with `p`, or rejects after `ms` naming `what` (a hang becomes a failure, not a stuck suite). */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<never>((_, reject) => {
      t = setTimeout(() => reject(new Error(`${what}: still pending after ${ms} ms (a hang)`)), ms);
    }),
  ]);
}

/**
 * The in-process stores as `[name, make]` rows for `describe.each`: memory, and LMDB in a temp dir
 * whose removal `make` pushes on `cleanups` (run by the test file, after the runtimes it closes).
 * @example
 * const backends = localStores(cleanups); describe.each(backends)('inbox (%s)', (_name, makeStore) => …)
 */
export function localStores(cleanups: (() => Promise<void>)[]): [string, () => EventStore][] {
  return [
    ['memory', () => memoryStore()],
    [
      'lmdb',
      () => {
        const dir = tempDir();
        cleanups.push(() => dir.cleanup());
        return lmdbStore({ path: dir.path });
      },
    ],
  ];
}
