import { expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { collect, stepStart, userMsg } from '../helpers/drafts.js';
import type { FailAfterWriting } from './event-store.contract.js';

/**
 * Group commit is all or nothing per append (docs/event-log.md "All or nothing"): appends of several
 * sessions in flight together, one of which fails after it started writing. The failed append
 * leaves no trace (no event, no id, no head change, also after a reopen); every other append is
 * stored whole or not at all — all of them rejected with the same error where they share the
 * transaction, each stored on its own where they do not — and retried with the same drafts, each
 * is stored exactly once, at the seqs it asked for.
 */
export function groupCommitContract(
  get: () => {
    store: EventStore;
    reopen: (() => Promise<EventStore>) | undefined;
    failAfterWriting: FailAfterWriting;
    replace(s: EventStore): void;
  },
) {
  it('a group commit is all or nothing per append: one failing after it wrote leaves no trace, the others are stored whole or not at all', async () => {
    const { store, failAfterWriting: fault } = get();
    const sids = ['g1', 'g2', 'g3', 'g4'];
    const epochs = new Map<string, number>();
    for (const sid of sids) {
      const { writerEpoch } = await store.attachWriter(sid);
      epochs.set(sid, writerEpoch);
      await store.append(sid, writerEpoch, 1, [{ ...userMsg(`${sid} first`), eventId: `${sid}-1` }]);
    }
    const batch = (sid: string) => [
      { ...userMsg(`${sid} a`), eventId: `${sid}-2` },
      { ...stepStart(), eventId: `${sid}-3` },
      { ...userMsg(`${sid} b`), eventId: `${sid}-4` },
    ];
    const failing = 'g2';
    fault.arm(failing);
    // issued together: one group (one transaction where the store shares them)
    const settled = await Promise.allSettled(sids.map((sid) => store.append(sid, epochs.get(sid)!, 2, batch(sid))));
    fault.disarm();

    const outcome = new Map(sids.map((sid, i) => [sid, settled[i]!]));
    const failed = outcome.get(failing)!;
    expect(failed.status).toBe('rejected');
    const error = (failed as PromiseRejectedResult).reason as unknown;
    const visible = async (s: EventStore, sid: string) => ({
      seqs: (await collect(s.readEvents(sid))).map((e) => e.seq),
      lastSeq: (await s.getHead(sid))?.lastSeq,
      ids: await Promise.all(['2', '3', '4'].map(async (n) => (await s.getEventById(sid, `${sid}-${n}`))?.seq)),
    });
    const nothing = { seqs: [1], lastSeq: 1, ids: [undefined, undefined, undefined] };
    const whole = { seqs: [1, 2, 3, 4], lastSeq: 4, ids: [2, 3, 4] };
    expect(await visible(store, failing), `${failing}: the append that failed after writing`).toEqual(nothing);
    for (const sid of sids.filter((x) => x !== failing)) {
      const o = outcome.get(sid)!;
      if (fault.sharesTransaction) {
        // documented: every append of the shared transaction is rejected with that error
        expect(o.status, `${sid} shares the failed transaction`).toBe('rejected');
        expect((o as PromiseRejectedResult).reason).toBe(error);
      } else {
        expect(o.status, `${sid} has a transaction of its own`).toBe('fulfilled');
      }
      if (o.status === 'fulfilled') {
        expect((o.value as EventRecord[]).map((e) => [e.seq, e.eventId])).toEqual([
          [2, `${sid}-2`],
          [3, `${sid}-3`],
          [4, `${sid}-4`],
        ]);
        expect(await visible(store, sid), sid).toEqual(whole);
      } else {
        expect(await visible(store, sid), sid).toEqual(nothing);
      }
    }

    // retried with the same drafts, each append is stored once, where it asked to be
    for (const sid of sids) {
      const r = await store.append(sid, epochs.get(sid)!, 2, batch(sid));
      expect(
        r.map((e) => [e.seq, e.eventId]),
        sid,
      ).toEqual([
        [2, `${sid}-2`],
        [3, `${sid}-3`],
        [4, `${sid}-4`],
      ]);
      expect(await visible(store, sid), sid).toEqual(whole);
    }

    // and nothing of the failed transaction comes back when the store is opened again
    const { reopen } = get();
    if (!reopen) return;
    await store.close();
    const again = await reopen();
    get().replace(again);
    for (const sid of sids) {
      const log = await collect(again.readEvents(sid));
      expect(
        log.map((e) => e.eventId),
        sid,
      ).toEqual([`${sid}-1`, `${sid}-2`, `${sid}-3`, `${sid}-4`]);
      expect((await again.getHead(sid))?.lastSeq).toBe(4);
    }
  });
}
