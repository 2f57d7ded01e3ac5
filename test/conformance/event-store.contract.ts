import { firstValueFrom, take, toArray } from 'rxjs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isInvariantViolation, isSequenceConflictError, isStaleWriterError, isValidationError } from '../../src/contracts/errors.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { collect, compaction, stepStart, userMsg } from '../helpers/drafts.js';
import { scaled } from '../helpers/load.js';
import { groupCommitContract } from './group-commit.contract.js';
import { workStoreContract } from './work-store.contract.js';
import { blobStoreContract, type BlobHooks } from './blob-store.contract.js';

/**
 * A fault the backend's wiring injects: the armed session's append fails *after* it wrote (inside
 * its transaction, before the commit). `sharesTransaction`: whether appends in flight together share
 * one transaction (group commit in one transaction, as LMDB's), documented to fail all together.
 */
export interface FailAfterWriting {
  arm(sessionId: string): void;
  disarm(): void;
  sharesTransaction: boolean;
}

export interface ContractStore {
  store: EventStore;
  reopen?: () => Promise<EventStore>;
  cleanup: () => Promise<void>;
  failAfterWriting: FailAfterWriting;
  /** The store's blobs seen from outside (blob-store.contract.ts). */
  blobs: BlobHooks;
}

/** The one contract every EventStore backend passes (memory, LMDB, PostgreSQL). */
export function eventStoreContract(name: string, make: () => Promise<ContractStore>) {
  describe(`EventStore contract: ${name}`, () => {
    let store: EventStore;
    let cleanup: () => Promise<void>;
    let reopen: (() => Promise<EventStore>) | undefined;
    let failAfterWriting: FailAfterWriting;
    let blobs: BlobHooks;
    beforeEach(async () => {
      ({ store, cleanup, reopen, failAfterWriting, blobs } = await make());
    });
    afterEach(async () => {
      await store.close();
      await cleanup();
    });

    workStoreContract(() => store);
    blobStoreContract(() => ({ store, ...(reopen ? { reopen } : {}), blobs, setStore: (s) => (store = s) }));

    it('attachWriter increments the epoch and reports the tail', async () => {
      expect(await store.attachWriter('s')).toEqual({ writerEpoch: 1, lastSeq: 0, lastTurn: 0 });
      const { writerEpoch } = await store.attachWriter('s');
      expect(writerEpoch).toBe(2);
      await store.append('s', 2, 1, [userMsg('a', 3), stepStart(3)]);
      expect(await store.attachWriter('s')).toEqual({ writerEpoch: 3, lastSeq: 2, lastTurn: 3 });
    });

    it("writerEpochNow, where the store has it, is the head's writer epoch at once (another attach included)", async () => {
      if (!store.writerEpochNow) return; // optional: a store without it is read through getHead
      expect(store.writerEpochNow('none')).toBeUndefined();
      await store.attachWriter('s');
      expect(store.writerEpochNow('s')).toBe(1);
      await store.attachWriter('s');
      expect(store.writerEpochNow('s')).toBe((await store.getHead('s'))!.writerEpoch);
      expect(store.writerEpochNow('s')).toBe(2);
    });

    it('assigns contiguous seqs from 1 and stores every field', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      const a = await store.append('s', writerEpoch, 1, [userMsg('a'), stepStart()]);
      const b = await store.append('s', writerEpoch, 3, [userMsg('b')]);
      expect([...a, ...b].map((e) => e.seq)).toEqual([1, 2, 3]);
      const all = await collect(store.readEvents('s'));
      expect(all.map((e) => e.seq)).toEqual([1, 2, 3]);
      const e = all[0]!;
      expect(Object.keys(e).sort()).toEqual(
        [
          'attempt',
          'eventId',
          'occurredAt',
          'payload',
          'schemaVersion',
          'seq',
          'sessionId',
          'step',
          'surfaceOp',
          'turn',
          'type',
          'writerEpoch',
        ].sort(),
      );
      expect(e).toMatchObject({
        sessionId: 's',
        type: 'user/message',
        writerEpoch: 1,
        schemaVersion: '1',
        payload: { message: { content: 'a' } },
      });
      expect(await collect(store.readEvents('s', { fromSeq: 2, toSeq: 2 }))).toHaveLength(1);
    });

    it('an empty batch writes nothing', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      expect(await store.append('s', writerEpoch, 1, [])).toEqual([]);
      expect((await store.getHead('s'))!.lastSeq).toBe(0);
    });

    it('is all or nothing: a batch with one invalid draft writes nothing', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      const bad = { ...userMsg('x'), payload: { message: { role: 'wizard', content: 'x' } } };
      await expect(store.append('s', writerEpoch, 1, [userMsg('ok'), bad])).rejects.toSatisfy(isValidationError);
      const wrongOp = { ...userMsg('x'), surfaceOp: 'none' as const };
      await expect(store.append('s', writerEpoch, 1, [wrongOp])).rejects.toSatisfy(isValidationError);
      expect(await collect(store.readEvents('s'))).toEqual([]);
      expect((await store.getHead('s'))!.lastSeq).toBe(0);
    });

    it('refuses a draft with a key the draft shape does not have (ValidationError naming it), and writes nothing', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      const extra = { ...userMsg('x'), extra: 1 };
      const e = await store.append('s', writerEpoch, 1, [userMsg('ok'), extra]).catch((x: unknown) => x);
      expect(isValidationError(e), String(e)).toBe(true);
      expect((e as { issues: { path: unknown[]; message: string }[] }).issues).toEqual([
        { path: [], message: expect.stringMatching(/extra/) },
      ]);
      expect((e as Error).message).toMatch(/drafts\[1\]/);
      expect(await collect(store.readEvents('s'))).toEqual([]);
      expect((await store.getHead('s'))!.lastSeq).toBe(0);
    });

    groupCommitContract(() => ({ store, reopen, failAfterWriting, replace: (s) => (store = s) }));

    it('returns the stored events for an identical retry, whatever expectedSeq says', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      const batch = [
        { ...userMsg('a'), eventId: 'e1' },
        { ...stepStart(), eventId: 'e2' },
      ];
      const first = await store.append('s', writerEpoch, 1, batch);
      const again = await store.append('s', writerEpoch, 1, batch);
      const later = await store.append('s', writerEpoch, 99, batch);
      expect(again).toEqual(first);
      expect(later).toEqual(first);
      expect(await collect(store.readEvents('s'))).toHaveLength(2);
    });

    it('finds events by id, generated ids included (they carry their seq; only caller-chosen ids are indexed)', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      const [gen1, gen2] = await store.append('s', writerEpoch, 1, [userMsg('a'), stepStart()]);
      const [own] = await store.append('s', writerEpoch, 3, [{ ...userMsg('b'), eventId: 'mine' }]);
      expect(gen1!.eventId).toMatch(/^1-[0-9a-f-]{36}$/);
      expect(gen2!.eventId).not.toBe(gen1!.eventId);
      expect(await store.getEventById('s', gen1!.eventId)).toEqual(gen1);
      expect(await store.getEventById('s', gen2!.eventId)).toEqual(gen2);
      expect(await store.getEventById('s', 'mine')).toEqual(own);
      // the generated form with a seq that holds another id, or a seq past the tail: not found
      expect(await store.getEventById('s', gen1!.eventId.replace(/^1-/, '2-'))).toBeUndefined();
      expect(await store.getEventById('s', gen1!.eventId.replace(/^1-/, '9-'))).toBeUndefined();
      expect(await store.getEventById('other', gen1!.eventId)).toBeUndefined();
      // a retry that names the generated ids it got back is recognised as the same batch
      const again = await store.append('s', writerEpoch, 99, [
        { ...userMsg('a'), eventId: gen1!.eventId },
        { ...stepStart(), eventId: gen2!.eventId },
      ]);
      expect(again).toEqual([gen1, gen2]);
      expect(await collect(store.readEvents('s'))).toHaveLength(3);
    });

    it('refuses a wrong expectedSeq with SequenceConflictError and writes nothing', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      await store.append('s', writerEpoch, 1, [userMsg('a')]);
      const err = await store.append('s', writerEpoch, 1, [userMsg('b')]).catch((e) => e);
      expect(isSequenceConflictError(err)).toBe(true);
      expect(err).toMatchObject({ expectedSeq: 1, actualNextSeq: 2 });
      await expect(store.append('s', writerEpoch, 5, [userMsg('c')])).rejects.toSatisfy(isSequenceConflictError);
      expect(await collect(store.readEvents('s'))).toHaveLength(1);
    });

    it('refuses an eventId reused with different content (InvariantViolation), before the seq check', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      await store.append('s', writerEpoch, 1, [{ ...userMsg('a'), eventId: 'e1' }]);
      await expect(store.append('s', writerEpoch, 2, [{ ...userMsg('changed'), eventId: 'e1' }])).rejects.toSatisfy(isInvariantViolation);
      await expect(store.append('s', writerEpoch, 7, [{ ...userMsg('changed'), eventId: 'e1' }])).rejects.toSatisfy(isInvariantViolation);
      await expect(store.append('s', writerEpoch, 2, [{ ...userMsg('a'), eventId: 'e1' }, userMsg('new')])).rejects.toSatisfy(
        isInvariantViolation,
      );
      expect(await collect(store.readEvents('s'))).toHaveLength(1);
    });

    it('fences a stale writer (StaleWriterError), checked before everything else', async () => {
      const a = await store.attachWriter('s');
      await store.append('s', a.writerEpoch, 1, [{ ...userMsg('a'), eventId: 'e1' }]);
      const b = await store.attachWriter('s');
      const err = await store.append('s', a.writerEpoch, 2, [userMsg('late')]).catch((e) => e);
      expect(isStaleWriterError(err)).toBe(true);
      expect(err).toMatchObject({ writerEpoch: 1, currentEpoch: 2 });
      // stale epoch wins over an event-id conflict and over a seq conflict
      await expect(store.append('s', a.writerEpoch, 9, [{ ...userMsg('zzz'), eventId: 'e1' }])).rejects.toSatisfy(isStaleWriterError);
      await expect(store.append('s', 1, 1, [userMsg('x')])).rejects.toSatisfy(isStaleWriterError);
      await store.append('s', b.writerEpoch, 2, [userMsg('b')]);
      const all = await collect(store.readEvents('s'));
      expect(all.map((e) => e.writerEpoch)).toEqual([1, 2]);
      await expect(store.append('never-attached', 1, 1, [userMsg('x')])).rejects.toSatisfy(isStaleWriterError);
    });

    it('loadSurface starts at the newest epoch and skips surfaceOp none, across several compactions', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      let seq = 1;
      const add = async (...d: Parameters<typeof store.append>[3]) => {
        const r = await store.append('s', writerEpoch, seq, d);
        seq += r.length;
        return r;
      };
      await add(userMsg('m1'), stepStart(), userMsg('m2'));
      expect((await store.loadSurface('s')).map((e) => e.payload.message)).toMatchObject([{ content: 'm1' }, { content: 'm2' }]);
      await add(compaction('sum1', 3), userMsg('m3'));
      expect((await store.loadSurface('s')).map((e) => e.seq)).toEqual([4, 5]);
      await add(stepStart(), compaction('sum2', 6), stepStart(), userMsg('m4'));
      const surface = await store.loadSurface('s');
      expect(surface.map((e) => e.type)).toEqual(['compaction', 'user/message']);
      expect(surface[0]!.payload.summary).toMatchObject({ content: 'sum2' });
      expect((await store.getHead('s'))!.surfaceStartSeq).toBe(7);
    });

    it('keeps sessions apart and lists them', async () => {
      const a = await store.attachWriter('a');
      const b = await store.attachWriter('b');
      await store.append('a', a.writerEpoch, 1, [userMsg('a1')]);
      await store.append('b', b.writerEpoch, 1, [userMsg('b1'), userMsg('b2')]);
      expect((await store.listSessions()).sort()).toEqual(['a', 'b']);
      expect(await collect(store.readEvents('a'))).toHaveLength(1);
      expect(await collect(store.readEvents('nobody'))).toEqual([]);
      expect(await store.loadSurface('nobody')).toEqual([]);
    });

    it('lets many sessions append concurrently, each contiguous', async () => {
      const sessions = Array.from({ length: 100 }, (_, i) => `c${i}`);
      await Promise.all(
        sessions.map(async (sid) => {
          const { writerEpoch } = await store.attachWriter(sid);
          for (let i = 1; i <= 10; i++) await store.append(sid, writerEpoch, i, [userMsg(`${sid}-${i}`)]);
        }),
      );
      for (const sid of sessions) {
        const events = await collect(store.readEvents(sid));
        expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        expect(events.map((e) => e.payload.message)).toMatchObject(events.map((_, i) => ({ content: `${sid}-${i + 1}` })));
      }
    });

    it(
      'reads 100k events with flat memory',
      async () => {
        const { writerEpoch } = await store.attachWriter('big');
        const filler = 'x'.repeat(400);
        for (let seq = 1; seq <= 100_000; seq += 2000) {
          await store.append(
            'big',
            writerEpoch,
            seq,
            Array.from({ length: 2000 }, () => userMsg(filler)),
          );
        }
        const gc = (globalThis as { gc?: () => void }).gc;
        gc?.();
        const base = process.memoryUsage().heapUsed;
        let peak = 0;
        let count = 0;
        let last = 0;
        for await (const e of store.readEvents('big')) {
          if (e.seq !== last + 1) throw new Error(`gap at ${e.seq}`);
          last = e.seq;
          if (++count % 10_000 === 0) {
            gc?.();
            peak = Math.max(peak, process.memoryUsage().heapUsed - base);
          }
        }
        expect(count).toBe(100_000);
        // 100k records of ~0.5 KB each would take > 60 MB if they were held; a paged read stays flat.
        expect(peak).toBeLessThan(25 * 1024 * 1024);
      },
      scaled(120_000),
    );

    it('events$ replays the log, then follows live appends without gaps or repeats', async () => {
      const { writerEpoch } = await store.attachWriter('s');
      await store.append('s', writerEpoch, 1, [userMsg('1'), userMsg('2'), userMsg('3')]);
      const seen = firstValueFrom(store.events$('s', { fromSeq: 2 }).pipe(take(5), toArray()));
      await store.append('s', writerEpoch, 4, [userMsg('4')]);
      await store.append('s', writerEpoch, 5, [userMsg('5'), userMsg('6')]);
      expect((await seen).map((e) => e.seq)).toEqual([2, 3, 4, 5, 6]);
    });

    it('persists across reopen', async () => {
      if (!reopen) return;
      const { writerEpoch } = await store.attachWriter('s');
      await store.append('s', writerEpoch, 1, [userMsg('kept'), compaction('sum', 1)]);
      await store.close();
      store = await reopen();
      expect((await collect(store.readEvents('s'))).map((e) => e.type)).toEqual(['user/message', 'compaction']);
      expect(await store.getHead('s')).toMatchObject({ lastSeq: 2, writerEpoch: 1, surfaceStartSeq: 2 });
      expect(await store.attachWriter('s')).toEqual({ writerEpoch: 2, lastSeq: 2, lastTurn: 1 });
    });

    it('validates public input', async () => {
      await expect(store.attachWriter('')).rejects.toSatisfy(isValidationError);
      await expect(store.append('s', 1, 0, [])).rejects.toSatisfy(isValidationError);
      await expect(store.append('s', 1, 1, [{ type: 'nope' } as never])).rejects.toSatisfy(isValidationError);
    });
  });
}
