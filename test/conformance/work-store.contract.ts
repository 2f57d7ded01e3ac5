import { describe, expect, it } from 'vitest';
import { isStaleWriterError, isValidationError } from '../../src/contracts/errors.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { sleep } from '../helpers/runtime.js';
import { scaled } from '../helpers/load.js';

/**
 * The contract of `store.work` (the inbox and leases, work-store.ts), run by eventStoreContract
 * against every backend. `store()` is the current test's store.
 */
export function workStoreContract(store: () => EventStore) {
  const input = (inputId: string, message = 'hi') => ({ kind: 'input' as const, inputId, mode: 'follow_up' as const, message });

  describe('work store (inbox and leases)', () => {
    it('submit is idempotent by id: accepted, then already_accepted; another entry under a used id is refused', async () => {
      const w = store().work!;
      expect(await w.submit('s', input('i1'))).toEqual({ status: 'accepted' });
      expect(await w.submit('s', input('i1'))).toEqual({ status: 'already_accepted' });
      expect((await w.submit('s', input('i1', 'other'))).status).toBe('refused');
      expect((await w.submit('s', { kind: 'cancel', entryId: 'i1' })).status).toBe('refused');
      expect(await w.submit('s', { kind: 'cancel', entryId: 'c1', reason: 'r' })).toEqual({ status: 'accepted' });
      const pending = await w.pending('s');
      expect(pending.map((p) => [p.entryId, p.seq, p.entry.kind])).toEqual([
        ['i1', 1, 'input'],
        ['c1', 2, 'cancel'],
      ]);
      expect(pending[0]!.entry).toEqual(input('i1'));
      expect(await store().getHead('s')).toBeUndefined(); // the log is untouched: no writer attached
    });

    it('the same entry submitted concurrently is stored once', async () => {
      const w = store().work!;
      const outcomes = await Promise.all(Array.from({ length: 5 }, () => w.submit('s', input('dup'))));
      expect(outcomes.map((o) => o.status).sort()).toEqual([
        'accepted',
        'already_accepted',
        'already_accepted',
        'already_accepted',
        'already_accepted',
      ]);
      expect((await w.pending('s')).map((p) => [p.entryId, p.seq])).toEqual([['dup', 1]]);
    });

    it('submit validates its entry and stores nothing for a bad one', async () => {
      const w = store().work!;
      await expect(w.submit('s', { kind: 'input', inputId: 'x' } as never)).rejects.toSatisfy(isValidationError);
      await expect(w.submit('', { kind: 'cancel', entryId: 'c' })).rejects.toSatisfy(isValidationError);
      expect(await w.pending('s')).toEqual([]);
    });

    it('every lease operation checks its inputs (ValidationError, strict options) and changes nothing for bad ones', async () => {
      const w = store().work!;
      await w.submit('s', input('i'));
      const [claimed] = await w.claim('w1', { limit: 1, leaseMs: 60_000 });
      expect(claimed?.sessionId).toBe('s');
      const bad: [string, () => Promise<unknown>][] = [
        ['bind: workerId', () => w.bind('s', '', 1, 1000)],
        ['renew: workerId', () => w.renew('', [{ sessionId: 's', writerEpoch: 1 }], 1000)],
        ['release: workerId', () => w.release('s', '', null, { resume: false })],
        ['release: writerEpoch', () => w.release('s', 'w1', 0, { resume: false })],
        ['release: unknown option', () => w.release('s', 'w1', null, { resume: false, force: true } as never)],
        ['release: resume not a boolean', () => w.release('s', 'w1', null, { resume: 'yes' } as never)],
        ['heartbeat: ttlMs', () => w.heartbeat({ workerId: 'w1', host: 'h', pid: 1, concurrency: 1 }, -5)],
        ['removeWorker: workerId', () => w.removeWorker(5 as never)],
      ];
      for (const [name, call] of bad) await expect(call(), name).rejects.toSatisfy(isValidationError);
      // the claim still holds: nothing was released
      expect((await w.listLeases()).find((l) => l.sessionId === 's')).toMatchObject({ workerId: 'w1' });
    });

    it('an input whose input/accepted is already in the log is already_accepted', async () => {
      const s = store();
      const { writerEpoch } = await s.attachWriter('s');
      await s.append('s', writerEpoch, 1, [
        {
          eventId: 'input:i9',
          type: 'input/accepted',
          turn: 0,
          step: 0,
          attempt: 0,
          surfaceOp: 'none',
          payload: { inputId: 'i9', mode: 'follow_up', messages: [{ role: 'user', content: 'x' }] },
        },
      ]);
      expect((await s.work!.submit('s', input('i9'))).status).toBe('already_accepted');
      expect(await s.work!.pending('s')).toEqual([]);
    });

    it('markApplied is fenced by the writer epoch: a stale writer records nothing', async () => {
      const s = store();
      const w = s.work!;
      await w.submit('s', input('a'));
      await w.submit('s', input('b'));
      const { writerEpoch } = await s.attachWriter('s');
      await w.markApplied('s', writerEpoch, [{ entryId: 'a', outcome: { status: 'applied', reason: 'input accepted' } }]);
      expect((await w.pending('s')).map((p) => p.entryId)).toEqual(['b']);
      expect((await w.getEntry('s', 'a'))!.applied).toMatchObject({
        writerEpoch,
        outcome: { status: 'applied', reason: 'input accepted' },
      });
      await s.attachWriter('s'); // another writer
      await expect(w.markApplied('s', writerEpoch, [{ entryId: 'b', outcome: { status: 'applied' } }])).rejects.toSatisfy(
        isStaleWriterError,
      );
      expect((await w.pending('s')).map((p) => p.entryId)).toEqual(['b']);
      // marking again changes nothing
      await w.markApplied('s', writerEpoch + 1, [{ entryId: 'a', outcome: { status: 'rejected' } }]);
      expect((await w.getEntry('s', 'a'))!.applied!.outcome.status).toBe('applied');
    });

    it('a claim takes sessions with work and no live lease; bind and renew hold only at the current epoch', async () => {
      const s = store();
      const w = s.work!;
      await w.submit('a', input('i'));
      await w.submit('b', input('i'));
      const first = await w.claim('w1', { limit: 10, leaseMs: 60_000 });
      expect(first.map((c) => c.sessionId).sort()).toEqual(['a', 'b']);
      expect(first.every((c) => !c.expired)).toBe(true);
      expect(await w.claim('w2', { limit: 10, leaseMs: 60_000 })).toEqual([]); // live leases
      const { writerEpoch } = await s.attachWriter('a');
      expect(await w.bind('a', 'w2', writerEpoch, 60_000)).toBe(false); // not its claim
      expect(await w.bind('a', 'w1', writerEpoch + 5, 60_000)).toBe(false); // not the session's epoch
      expect(await w.bind('a', 'w1', writerEpoch, 60_000)).toBe(true);
      expect(await w.renew('w1', [{ sessionId: 'a', writerEpoch }], 60_000)).toEqual(['a']);
      await s.attachWriter('a'); // someone else attached: the lease is gone
      expect(await w.renew('w1', [{ sessionId: 'a', writerEpoch }], 60_000)).toEqual([]);
      const leases = await w.listLeases();
      expect(leases.find((l) => l.sessionId === 'a')).toMatchObject({ workerId: 'w1', writerEpoch, inboxSeq: 1, appliedSeq: 0 });
      // released with its entry still pending: another worker takes it
      await w.release('b', 'w1', null, { resume: false });
      expect((await w.claim('w2', { limit: 10, leaseMs: 60_000 })).map((c) => c.sessionId)).toEqual(['b']);
    });

    it('an expired lease is claimed by another worker, which is told whose it was', async () => {
      const w = store().work!;
      await w.submit('s', input('i'));
      expect(await w.claim('w1', { limit: 1, leaseMs: 100 })).toHaveLength(1);
      await sleep(scaled(300));
      expect(await w.claim('w2', { limit: 1, leaseMs: 60_000 })).toEqual([{ sessionId: 's', expired: true, previousOwner: 'w1' }]);
      expect(await w.renew('w1', [{ sessionId: 's', writerEpoch: 1 }], 60_000)).toEqual([]);
      // the old owner's release does not free the new owner's lease
      await w.release('s', 'w1', null, { resume: false });
      expect((await w.listLeases()).find((l) => l.sessionId === 's')!.workerId).toBe('w2');
    });

    it("a release naming its writer epoch never frees the same worker's newer claim, not yet bound (its run would be left to no one)", async () => {
      const s = store();
      const w = s.work!;
      await w.submit('s', input('i'));
      await w.claim('w1', { limit: 1, leaseMs: 100 });
      const { writerEpoch } = await s.attachWriter('s');
      expect(await w.bind('s', 'w1', writerEpoch, 100)).toBe(true);
      await sleep(scaled(300));
      // the lease expired (the worker paused); the same worker claims the session again
      expect(await w.claim('w1', { limit: 1, leaseMs: 60_000 })).toEqual([{ sessionId: 's', expired: true, previousOwner: 'w1' }]);
      // the old hold's release, landing late, leaves the new claim alone
      await w.release('s', 'w1', writerEpoch, { resume: false });
      expect((await w.listLeases()).find((l) => l.sessionId === 's')).toMatchObject({ workerId: 'w1', writerEpoch: null });
      const again = await s.attachWriter('s');
      expect(await w.bind('s', 'w1', again.writerEpoch, 60_000)).toBe(true);
    });

    it('a release with resume leaves work (a run to continue) even with an empty inbox; applied entries leave none', async () => {
      const s = store();
      const w = s.work!;
      await w.submit('s', input('i'));
      await w.claim('w1', { limit: 1, leaseMs: 60_000 });
      const { writerEpoch } = await s.attachWriter('s');
      expect(await w.bind('s', 'w1', writerEpoch, 60_000)).toBe(true);
      await w.markApplied('s', writerEpoch, [{ entryId: 'i', outcome: { status: 'applied' } }]);
      await w.release('s', 'w1', writerEpoch, { resume: true });
      expect((await w.claim('w2', { limit: 1, leaseMs: 60_000 })).map((c) => c.sessionId)).toEqual(['s']);
      await w.release('s', 'w2', null, { resume: false });
      expect(await w.claim('w3', { limit: 1, leaseMs: 60_000 })).toEqual([]);
    });

    it('concurrent claims never hand one session to two workers', async () => {
      const w = store().work!;
      for (let i = 0; i < 30; i++) await w.submit(`s${i}`, input('i'));
      const claims = await Promise.all(['w1', 'w2', 'w3', 'w4'].map((id) => w.claim(id, { limit: 10, leaseMs: 60_000 })));
      const all = claims.flat().map((c) => c.sessionId);
      expect(new Set(all).size).toBe(all.length);
      expect(all.length).toBe(30);
    });

    it('workers heartbeat and are listed live until removed', async () => {
      const w = store().work!;
      await w.heartbeat({ workerId: 'w1', host: 'h', pid: 42, concurrency: 8 }, 60_000);
      await w.heartbeat({ workerId: 'w2', host: 'h', pid: 43, concurrency: 8 }, 1);
      await sleep(scaled(50));
      const listed = await w.listWorkers();
      expect(listed.map((x) => [x.workerId, x.pid, x.live])).toEqual([
        ['w1', 42, true],
        ['w2', 43, false],
      ]);
      await w.removeWorker('w1');
      expect((await w.listWorkers()).map((x) => x.workerId)).toEqual(['w2']);
    });
  });
}
