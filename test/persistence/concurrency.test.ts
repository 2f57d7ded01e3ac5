/**
 * Concurrent reads, appends and close on the event stores (memory and LMDB). Each test runs
 * against both backends where the contract is shared (the memory store must "behave the same" — docs/event-log.md: "Both implement
 * `EventStore` … and pass one conformance suite").
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isStoreClosedError } from '../../src/contracts/errors.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { memoryStore } from '../../src/persistence/memory-store.js';
import { compaction, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

const dirs: ReturnType<typeof tempDir>[] = [];
const opened: EventStore[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close().catch(() => {});
  for (const d of dirs.splice(0)) await d.cleanup();
});

type Make = (opts?: { readPageSize?: number }) => EventStore;
const backends: [string, Make][] = [
  ['memory', () => memoryStore()],
  [
    'lmdb',
    (opts) => {
      const d = tempDir('actorloop-cr-');
      dirs.push(d);
      const s = lmdbStore({ path: d.path, ...opts });
      opened.push(s);
      return s;
    },
  ],
];

const ticks = async (n: number) => {
  for (let i = 0; i < n; i++) await Promise.resolve();
};

describe.each(backends)('reads, appends and close racing each other (%s store)', (_name, make) => {
  it('loadSurface racing a compaction append returns either the old surface or the new one, never a mix spanning the epoch', async () => {
    // DESIGN §2: "loadSurface(sessionId) — events from the last `epoch` on, `surfaceOp ≠ none`."
    // A reader must see all of an append or none of it; a surface that holds the messages the
    // compaction replaced *and* the compaction itself was never the session's surface.
    const store = make();
    const bad: string[] = [];
    for (let delay = 0; delay <= 24; delay++) {
      const sid = `s${delay}`;
      const { writerEpoch } = await store.attachWriter(sid);
      await store.append(sid, writerEpoch, 1, [userMsg('m1'), userMsg('m2'), userMsg('m3'), userMsg('m4')]);
      const old = (await store.loadSurface(sid)).map((e) => e.seq);
      const reading = store.loadSurface(sid);
      await ticks(delay);
      const appended = store.append(sid, writerEpoch, 5, [compaction('summary', 4), userMsg('m5')]);
      const got = (await reading).map((e) => e.seq);
      await appended;
      const now = (await store.loadSurface(sid)).map((e) => e.seq);
      expect(now).toEqual([5, 6]);
      if (JSON.stringify(got) !== JSON.stringify(old) && JSON.stringify(got) !== JSON.stringify(now)) {
        bad.push(`after ${delay} microtasks: [${got.join(',')}]`);
      }
    }
    expect(bad, `surfaces neither [1,2,3,4] nor [5,6]`).toEqual([]);
  });

  it('a read that close() interrupts ends with StoreClosedError, never silently going on or shortening the log', async () => {
    // docs/event-log.md, Reading: "A read the store's `close()` interrupts ends with
    // `StoreClosedError`, never as a shorter log."
    const store = make({ readPageSize: 2 });
    const { writerEpoch } = await store.attachWriter('r');
    await store.append('r', writerEpoch, 1, [stepStart(), stepStart(), stepStart(), stepStart(), stepStart()]);
    const seen: number[] = [];
    let error: unknown;
    try {
      for await (const e of store.readEvents('r')) {
        seen.push(e.seq);
        if (e.seq === 1) await store.close();
      }
    } catch (e) {
      error = e;
    }
    expect(isStoreClosedError(error), `read went on after close() and yielded seqs ${seen.join(',')} without an error`).toBe(true);
  });

  it('a second close() does not resolve before the store has finished its queued appends', async () => {
    // close() drains queued appends before it closes (they "must resolve or reject with
    // StoreClosedError, never hang, never half-write"); a caller awaiting close() — any caller —
    // must be able to rely on the store being closed, not still committing behind its back.
    const store = make();
    const { writerEpoch } = await store.attachWriter('c');
    let settled = 0;
    const appends = [1, 2, 3].map((seq) => store.append('c', writerEpoch, seq, [stepStart()]).finally(() => settled++));
    const first = store.close();
    await store.close(); // e.g. the runtime's shutdown and the app's both close the store
    const settledWhenSecondCloseResolved = settled;
    await first;
    await Promise.allSettled(appends);
    expect(settled).toBe(3);
    expect(settledWhenSecondCloseResolved, 'appends still in flight after an awaited close() resolved').toBe(3);
  });
});
