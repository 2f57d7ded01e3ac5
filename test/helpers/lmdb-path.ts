import { createRuntime, lmdbStore, type EventStore, type Runtime, type RuntimeOptions } from '../../src/index.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { storeWithAppend } from './runtime.js';
import { tempDir } from './tmp.js';

/**
 * A temp LMDB path for one test: runtimes made with `rt` are closed (once) and the directory is
 * removed by the cleanup pushed onto `cleanups` (run it in afterEach). Runtimes made otherwise
 * (e.g. abandoned to simulate a crash) are not closed.
 */
export function lmdbPath(cleanups: (() => Promise<void>)[]) {
  const dir = tempDir();
  const runtimes: Runtime[] = [];
  cleanups.push(async () => {
    for (const r of runtimes) await r.close().catch(() => undefined);
    await dir.cleanup();
  });
  return {
    path: dir.path,
    rt(options: Omit<RuntimeOptions, 'store'>, store: EventStore = lmdbStore({ path: dir.path })): Runtime {
      const r = createRuntime({ ...options, store });
      runtimes.push(r);
      return r;
    },
  };
}

/** An EventStore wrapper whose append can be intercepted (delayed, failed, or hung) before it runs. */
export function hookedStore(inner: EventStore, onAppend: (drafts: EventDraft[]) => Promise<void> | void): EventStore {
  return storeWithAppend(inner, async (id, epoch, seq, drafts) => {
    await onAppend(drafts as EventDraft[]);
    return inner.append(id, epoch, seq, drafts);
  });
}
