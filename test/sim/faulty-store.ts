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
import { never, type Proc, type World } from './world.js';

export interface StoreFaults {
  /** Probability per append of each fault. */
  fail: number;
  ackLost: number;
  /** Probability per append of a crash at this commit point (while the world still allows crashes). */
  crash: number;
  /** Probability per read (head, event by id) of a transient failure. */
  readFail: number;
}

export const NO_STORE_FAULTS: StoreFaults = { fail: 0, ackLost: 0, crash: 0, readFail: 0 };

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
}

const transient = (what: string) => new Error(`transient: ${what} (injected)`);

export function faultyStore(inner: EventStore, proc: Proc, world: World, ctl: FaultControl, acks: AckLedger): EventStore {
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
  return {
    attachWriter: async (sid) => {
      await latency();
      if (!proc.alive) return never();
      const r = await inner.attachWriter(sid);
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
      let records: EventRecord[];
      try {
        records = await inner.append(sid, epoch, expectedSeq, drafts);
      } catch (e) {
        await latency();
        if (!proc.alive) return never();
        throw e;
      }
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
      return records;
    },
    readEvents: (sid, range) =>
      (async function* () {
        await latency();
        if (!proc.alive) return never();
        for await (const e of inner.readEvents(sid, range)) yield e;
      })(),
    loadSurface: (sid) => read('loadSurface', () => inner.loadSurface(sid)),
    getHead: (sid) => read('getHead', () => inner.getHead(sid)),
    getEventById: (sid, id) => read('getEventById', () => inner.getEventById(sid, id)),
    listSessions: () => inner.listSessions(),
    events$: (sid, o) => inner.events$(sid, o),
    // the durable substrate outlives every process: closing a runtime closes only its view
    close: async () => {},
  };
}
