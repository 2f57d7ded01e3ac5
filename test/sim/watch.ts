/**
 * What the durable store holds at each instant, watched from outside the runtime (issue 30 item
 * 16): the current writer epoch of every session, the `tool/call` intents that are durable, and
 * the resources recorded as held by calls that may still be running. The simulator asks it at the
 * instant something happens — a tool starts, an append commits — and records what broke a promise:
 * - a call starts only after its `tool/call` is durable (write-ahead order of tool intents);
 * - no call starts while an `uncertain-hanging` (or unsettled cancelled) call holds a resource it
 *   names (lock rule);
 * - a fenced writer (its epoch older than the session's current one) starts no tool and commits
 *   nothing (fencing);
 * - an append repeated with the same drafts returns the stored events and writes nothing (store
 *   idempotency).
 *
 * The lock fold is written here on its own (not the runtime's `applyOutcomeLocks`), so a bug
 * there cannot hide from it. Must not import vitest.
 */
import type { EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';

interface SessionWatch {
  /** The store's writer epoch now (every attach goes through `watchedStore`). */
  epoch: number;
  /** Durable `tool/call` intents: callId → the resources the call declared. */
  intents: Map<string, readonly string[]>;
  /** resource → the call whose recorded outcome holds it. */
  held: Map<string, string>;
  /** Records seen, in order (the mirror of the durable log). */
  seen: number;
}

export class Watch {
  private readonly sessions = new Map<string, SessionWatch>();
  /** `${proc}\0${sessionId}` → the epoch that process's runtime attached last for the session. */
  private readonly procEpochs = new Map<string, number>();
  /** The broken promises seen, one line each. */
  readonly problems: string[] = [];
  /** Counts, to show the invariants are exercised (figures of a seed range). */
  readonly exercised = {
    toolStarts: 0,
    locksTaken: 0,
    callsBlocked: 0,
    opensWithLocks: 0,
    startsBesideHeldLocks: 0,
    staleAttempts: 0,
    repeatedAppends: 0,
    /** Attempts that started with their run's cancel recorded by an earlier one (invariants.ts afterStandingCancel). */
    attemptsAfterCancel: 0,
  };

  private of(sid: string): SessionWatch {
    let s = this.sessions.get(sid);
    if (!s) {
      s = { epoch: 0, intents: new Map(), held: new Map(), seen: 0 };
      this.sessions.set(sid, s);
    }
    return s;
  }

  epochOf(sid: string): number {
    return this.of(sid).epoch;
  }

  /** The last seq committed (and folded) in `sid`. */
  seenOf(sid: string): number {
    return this.of(sid).seen;
  }

  /** The epoch `proc`'s runtime holds for `sid` (0: it never attached). */
  procEpoch(proc: number, sid: string): number {
    return this.procEpochs.get(`${proc}\u0000${sid}`) ?? 0;
  }

  attachedBy(proc: number, sid: string, epoch: number): void {
    this.procEpochs.set(`${proc}\u0000${sid}`, epoch);
  }

  /** Folds one committed record (called synchronously as it commits). */
  observe(r: EventRecord): void {
    const s = this.of(r.sessionId);
    if (r.seq !== s.seen + 1) this.problems.push(`watch: ${r.sessionId} record ${r.seq} seen after ${s.seen}`);
    s.seen = r.seq;
    const p = r.payload as Record<string, unknown>;
    if (r.type === 'tool/call') s.intents.set(String(p.callId), p.resources as string[]);
    else if (r.type === 'tool/result' && p.copiedFrom === undefined) {
      const o = p.outcome as { kind: string; settled?: boolean; resourceLocks?: string[]; releaseResources?: string[] };
      if (o.kind === 'uncertain-hanging' || (o.kind === 'cancelled' && o.settled === false)) {
        for (const k of o.resourceLocks ?? []) s.held.set(k, String(p.callId));
        if (o.resourceLocks?.length) this.exercised.locksTaken++;
      }
      if (o.kind === 'skipped' && String((o as { reason?: string }).reason).startsWith('blocked')) this.exercised.callsBlocked++;
      if (o.kind === 'completed') for (const k of o.releaseResources ?? []) s.held.delete(k);
    } else if (r.type === 'resources/released') for (const k of p.keys as string[]) s.held.delete(k);
  }

  /** A tool's execute (or a re-executing reconcile) was entered, in `proc`, at this instant. */
  toolStarted(proc: number, sid: string, c: { callId: string; name: string; mode: string }): void {
    const s = this.of(sid);
    this.exercised.toolStarts++;
    const resources = s.intents.get(c.callId);
    if (!resources)
      this.problems.push(`${sid}: ${c.mode} ${c.name} ${c.callId} started before its tool/call was durable (write-ahead order)`);
    const holders = (resources ?? []).filter((k) => s.held.has(k));
    if (holders.length > 0) {
      this.exercised.startsBesideHeldLocks++;
      this.problems.push(
        `${sid}: ${c.mode} ${c.name} ${c.callId} started while ${holders.map((k) => `${k} is held by ${s.held.get(k)}`).join(', ')} (lock rule)`,
      );
    }
    const mine = this.procEpoch(proc, sid);
    if (mine !== s.epoch)
      this.problems.push(
        `${sid}: ${c.mode} ${c.name} ${c.callId} started by proc ${proc} under writer epoch ${mine} while the session's epoch is ${s.epoch} (a fenced writer ran a tool)`,
      );
  }

  /** An append by a writer of `callerEpoch` returned records, at this instant. */
  appended(proc: number, sid: string, callerEpoch: number, records: readonly EventRecord[], wrote: boolean): void {
    const s = this.of(sid);
    if (callerEpoch !== s.epoch)
      this.problems.push(
        `${sid}: proc ${proc}'s append under writer epoch ${callerEpoch} ${wrote ? `committed ${records.map((r) => r.type).join(',')}` : 'was answered'} while the session's epoch is ${s.epoch} (a fenced writer committed)`,
      );
  }

  /** Folds an attach that just committed (synchronously, in `watchedStore`). */
  attached(sid: string, epoch: number): void {
    const s = this.of(sid);
    s.epoch = epoch;
    if (s.held.size > 0) this.exercised.opensWithLocks++;
  }
}

/**
 * The durable store as the watch sees it: every attach and commit folded synchronously at the
 * instant it happens (the memory store commits within its call; `events$` publishes synchronously).
 * Sessions not in `sessionIds` are followed from their first attach (a session is written only
 * by a writer that attached it).
 */
export function watchedStore<S extends EventStore>(
  inner: S,
  watch: Watch,
  sessionIds: readonly string[],
  /** Also told every record as it commits (the tree family's hand-over tracker). */
  also?: (r: EventRecord) => void,
): S {
  const watched = new Set<string>();
  const follow = (sid: string) => {
    if (watched.has(sid)) return;
    watched.add(sid);
    inner.events$(sid, { fromSeq: 1 }).subscribe((r) => {
      watch.observe(r);
      also?.(r);
    });
  };
  for (const sid of sessionIds) follow(sid);
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'attachWriter') {
        return (sid: string) => {
          // a session not known up front (a child session, opened by its parent's call) is followed from its first attach
          follow(sid);
          // the memory store's attach commits within the call: epoch + 1, atomically
          watch.attached(sid, watch.epochOf(sid) + 1);
          const expected = watch.epochOf(sid);
          return target.attachWriter(sid).then((r) => {
            if (r.writerEpoch !== expected) watch.problems.push(`watch: ${sid} attached epoch ${r.writerEpoch}, expected ${expected}`);
            return r;
          });
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
