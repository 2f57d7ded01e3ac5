/**
 * The simulator's store: one memory store is the durable substrate (what survives every crash),
 * and each simulated process reaches it through its own fault-injecting wrapper. The wrapper
 * models what is durable versus what was acknowledged:
 * - `fail`: the append fails before it commits (nothing durable, an error to the caller);
 * - `ack-lost`: it commits, then the caller gets an error instead of the acknowledgement;
 * - `crash-before` / `crash-after`: the process dies at this commit point, before or after the
 *   commit (the caller never hears back: a crashed process runs nothing more);
 * - latency before and after the commit, so concurrent appends of different sessions and replies
 *   interleave by seed; a paused process's calls wait until it wakes (a stale writer).
 * Every acknowledged append is recorded: the log must still hold it at the end.
 */
import type { EventDraft, EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { isStaleWriterError } from '../../src/contracts/errors.js';
import { prepareDrafts, toRecord } from '../../src/persistence/codec.js';
import type { Watch } from './watch.js';
import { never, type Proc, type World } from './world.js';

export interface StoreFaults {
  /** Probability per append of each fault. */
  fail: number;
  ackLost: number;
  /** Probability per append of a crash at this commit point (while the world still allows crashes). */
  crash: number;
  /** Probability per read (head, event by id) of a transient failure. */
  readFail: number;
  /** Probability per committed append that it is sent again, same drafts (a duplicated request). */
  repeat: number;
}

export const NO_STORE_FAULTS: StoreFaults = { fail: 0, ackLost: 0, crash: 0, readFail: 0, repeat: 0 };

/**
 * Broken variants of the store's promises, each for showing that an invariant notices:
 * - `fence-blind`: appends are made under the session's current epoch, whatever the caller's;
 * - `stale-head`: a process reads the head with the writer epoch it attached (it never sees a takeover);
 * - `forget-locks`: the store hides the locks it holds: the head has none, and a committed
 *   uncertain outcome comes back naming none;
 * - `early-ack`: an append of tool intents is acknowledged before it is durable (it lands a moment later).
 */
export type StoreBreak = 'fence-blind' | 'stale-head' | 'forget-locks' | 'early-ack';

/** What the durable store told its callers: the events each acknowledged append returned. */
export class AckLedger {
  readonly acked = new Map<string, EventRecord>(); // `${sessionId}\u0000${seq}` → record
  record(records: readonly EventRecord[]): void {
    for (const r of records) this.acked.set(`${r.sessionId}\u0000${r.seq}`, r);
  }
}

export interface FaultControl {
  faults: StoreFaults;
  /** Crashes still allowed in this seed (a crash decrements it). */
  crashesLeft: number;
  /** Broken variant: an append whose acknowledgement was lost is retried blindly (new ids, next seq). */
  blindRetry?: boolean;
  broken?: StoreBreak;
  /**
   * The process reads a session's writer epoch synchronously (`writerEpochNow`), as it does on the
   * memory and LMDB stores (the tree family); without it every fence check reads the head.
   */
  syncEpoch?: boolean;
}

/** A record as the `forget-locks` variant returns it: an uncertain outcome's locks left out. */
function withoutLocks(r: EventRecord): EventRecord {
  const o = r.type === 'tool/result' ? (r.payload.outcome as { kind: string; resourceLocks?: string[] }) : undefined;
  if (!o?.resourceLocks) return r;
  return { ...r, payload: { ...r.payload, outcome: { ...o, resourceLocks: [] } } };
}

const transient = (what: string) => new Error(`transient: ${what} (injected)`);

export function faultyStore(inner: EventStore, proc: Proc, world: World, ctl: FaultControl, acks: AckLedger, watch: Watch): EventStore {
  const rng = world.rng;
  const latency = async () => {
    await proc.gate();
    const ms = rng.int(4);
    if (ms > 0) await proc.sleep(ms);
    await proc.gate();
  };
  const crashHere = (where: string): boolean => {
    if (ctl.crashesLeft > 0 && rng.chance(ctl.faults.crash)) {
      ctl.crashesLeft--;
      world.note(`store: crash ${where}`);
      proc.crash();
      return true;
    }
    return false;
  };
  const read = async <T>(what: string, f: () => Promise<T>): Promise<T> => {
    await latency();
    if (!proc.alive) return never();
    if (rng.chance(ctl.faults.readFail)) {
      world.note(`store: ${what} failed`);
      throw transient(`${what} failed`);
    }
    return f();
  };
  /** The same append sent again: the store returns the stored events and writes nothing. */
  const repeated = async (
    sid: string,
    epoch: number,
    expectedSeq: number,
    drafts: readonly EventDraft[],
    first: readonly EventRecord[],
  ) => {
    watch.exercised.repeatedAppends++;
    const before = watch.seenOf(sid);
    let again: EventRecord[];
    try {
      again = await inner.append(sid, epoch, expectedSeq, drafts);
    } catch (e) {
      watch.problems.push(
        `${sid}: an append of ${first.map((r) => r.eventId).join(',')} sent again failed: ${(e as Error).name}: ${(e as Error).message} (store idempotency)`,
      );
      return;
    }
    const text = (rs: readonly EventRecord[]) => JSON.stringify(rs.map(({ occurredAt: _t, ...r }) => r));
    if (watch.seenOf(sid) !== before)
      watch.problems.push(
        `${sid}: an append of ${first.map((r) => r.eventId).join(',')} sent again wrote ${watch.seenOf(sid) - before} more record(s) (store idempotency)`,
      );
    else if (text(again) !== text(first))
      watch.problems.push(
        `${sid}: an append sent again returned ${text(again).slice(0, 200)}, not the stored ${text(first).slice(0, 200)} (store idempotency)`,
      );
  };
  /** The broken `early-ack` variant: the records are returned now and committed a moment later. */
  const earlyAck = (sid: string, epoch: number, expectedSeq: number, drafts: readonly EventDraft[]): EventRecord[] => {
    const now = new Date(world.now).toISOString();
    const records = prepareDrafts(drafts, 'append', sid).map((d, i) => toRecord(sid, expectedSeq + i, epoch, d, now));
    const later = records.map(
      (r) =>
        ({
          eventId: r.eventId,
          type: r.type,
          turn: r.turn,
          step: r.step,
          attempt: r.attempt,
          surfaceOp: r.surfaceOp,
          payload: r.payload,
        }) as EventDraft,
    );
    world.at(world.now + 5, () => void inner.append(sid, epoch, expectedSeq, later).catch(() => undefined));
    acks.record(records);
    return records;
  };
  return {
    attachWriter: async (sid) => {
      await latency();
      if (!proc.alive) return never();
      const r = await inner.attachWriter(sid);
      watch.attachedBy(proc.id, sid, r.writerEpoch);
      world.note(`store: attach ${sid} epoch ${r.writerEpoch} (proc ${proc.id})`);
      return r;
    },
    append: async (sid: string, epoch: number, expectedSeq: number, drafts: readonly EventDraft[]) => {
      await latency();
      if (!proc.alive) return never();
      const types = drafts.map((d) => d.type).join(',');
      if (rng.chance(ctl.faults.fail)) {
        world.note(`store: append ${sid}@${expectedSeq} [${types}] FAILED before commit`);
        throw transient('append failed before commit');
      }
      if (crashHere(`before commit of ${sid}@${expectedSeq} [${types}]`)) return never();
      if (ctl.broken === 'early-ack' && drafts.some((d) => d.type === 'tool/call')) return earlyAck(sid, epoch, expectedSeq, drafts);
      let records: EventRecord[];
      const seenBefore = watch.seenOf(sid);
      const stale = epoch < watch.epochOf(sid);
      if (stale) watch.exercised.staleAttempts++;
      try {
        records = await inner.append(sid, ctl.broken === 'fence-blind' ? watch.epochOf(sid) : epoch, expectedSeq, drafts);
      } catch (e) {
        if (stale && !isStaleWriterError(e))
          watch.problems.push(
            `${sid}: proc ${proc.id}'s append under writer epoch ${epoch} was refused with ${(e as Error).name}, not as a stale writer, while the session's epoch is ${watch.epochOf(sid)} (fencing is checked first)`,
          );
        await latency();
        if (!proc.alive) return never();
        throw e;
      }
      // at the instant of the commit (nothing else ran since: the memory store commits within its call)
      watch.appended(proc.id, sid, epoch, records, watch.seenOf(sid) > seenBefore);
      if (drafts.every((d) => d.eventId !== undefined) && rng.chance(ctl.faults.repeat))
        await repeated(sid, epoch, expectedSeq, drafts, records);
      if (crashHere(`after commit of ${sid}@${expectedSeq} [${types}]`)) return never();
      if (rng.chance(ctl.faults.ackLost)) {
        world.note(`store: append ${sid}@${expectedSeq} [${types}] committed, ACK LOST`);
        if (ctl.blindRetry) {
          // the broken variant: the wrapper "retries" the lost append as new events at the next seq
          const again = drafts.map(({ eventId: _id, ...d }) => d);
          const dup = await inner.append(sid, epoch, records.at(-1)!.seq + 1, again);
          await latency();
          acks.record(dup);
          return dup;
        }
        await latency();
        if (!proc.alive) return never();
        throw transient('append committed but its acknowledgement was lost');
      }
      await latency();
      if (!proc.alive) return never();
      acks.record(records);
      return ctl.broken === 'forget-locks' ? records.map(withoutLocks) : records;
    },
    readEvents: (sid, range) =>
      (async function* () {
        await latency();
        if (!proc.alive) return never();
        for await (const e of inner.readEvents(sid, range)) yield e;
      })(),
    loadSurface: (sid) => read('loadSurface', () => inner.loadSurface(sid)),
    getHead: (sid) =>
      read('getHead', async () => {
        const h = await inner.getHead(sid);
        const mine = watch.procEpoch(proc.id, sid);
        if (h && ctl.broken === 'stale-head' && mine > 0) return { ...h, writerEpoch: mine };
        if (h && ctl.broken === 'forget-locks') return { ...h, heldLocks: [] };
        return h;
      }),
    getEventById: (sid, id) => read('getEventById', () => inner.getEventById(sid, id)),
    ...(ctl.syncEpoch && inner.writerEpochNow ? { writerEpochNow: (sid: string) => inner.writerEpochNow!(sid) } : {}),
    listSessions: () => inner.listSessions(),
    events$: (sid, o) => inner.events$(sid, o),
    // the durable substrate outlives every process: closing a runtime closes only its view
    close: async () => {},
  };
}
