/**
 * The worker-pool family's invariants (pool-simulate.ts), checked on the state the pool reached by
 * itself: every inbox entry applied exactly once; a side effect starts only while its worker holds
 * the session's lease in the store (so at most one writer acts per session at a time); the log's
 * writer epochs never go back; every session's run settled (none starved while a worker had room);
 * every claimed session released or taken over (no lease left with a crashed worker).
 */
import type { LeaseInfo } from '../../src/contracts/inbox.js';
import type { EventStore } from '../../src/index.js';
import type { WorkStore } from '../../src/persistence/work-store.js';

/** A side effect (the exclusive `charge`) as it started: who, and the store's leases at that instant. */
export interface ToolStart {
  workerId: string;
  sessionId: string;
  callId: string;
  key: string;
  at: number;
  leases: Promise<LeaseInfo[]>;
}

export async function checkPool(o: {
  store: EventStore & { work: WorkStore };
  sessions: string[];
  starts: ToolStart[];
  leaseSnapshots: unknown[];
  live: (workerId: string) => boolean;
}): Promise<string[]> {
  const v: string[] = [];
  const { store } = o;
  const leases = new Map((await store.work.listLeases()).map((l) => [l.sessionId, l]));
  for (const sid of o.sessions) {
    const inputId = `${sid}-in`;
    const entry = await store.work.getEntry(sid, inputId);
    if (!entry?.applied) v.push(`${sid}: inbox entry ${inputId} never applied`);
    const log = [];
    for await (const e of store.readEvents(sid)) log.push(e);
    const accepted = log.filter((e) => e.type === 'input/accepted' && (e.payload as { inputId?: string }).inputId === inputId).length;
    if (accepted !== 1) v.push(`${sid}: input ${inputId} accepted ${accepted} times`);
    for (let i = 1; i < log.length; i++)
      if (log[i]!.writerEpoch < log[i - 1]!.writerEpoch)
        v.push(`${sid}: seq ${log[i]!.seq} appended by epoch ${log[i]!.writerEpoch} after epoch ${log[i - 1]!.writerEpoch}`);
    const head = await store.getHead(sid);
    if (head?.openRun || (head?.pendingInputs.length ?? 0) > 0)
      v.push(
        `${sid}: starved — its run ${head?.openRun?.runId ?? inputId} never settled (${head?.pendingInputs.length ?? 0} inputs pending)`,
      );
    if (!log.some((e) => e.type === 'run/end')) v.push(`${sid}: no run ended`);
    const lease = leases.get(sid);
    if (lease?.workerId && !o.live(lease.workerId)) v.push(`${sid}: still leased by crashed worker ${lease.workerId}, never taken over`);
  }
  const byCall = new Map<string, ToolStart[]>();
  for (const s of o.starts) {
    const k = `${s.sessionId}/${s.key}`;
    byCall.set(k, [...(byCall.get(k) ?? []), s]);
    const lease = (await s.leases).find((l) => l.sessionId === s.sessionId);
    if (!lease || lease.workerId !== s.workerId || lease.expired)
      v.push(
        `${s.sessionId}: ${s.workerId} started ${s.key} at ${s.at} without the lease (the store: ${lease ? `${lease.workerId ?? 'nobody'}${lease.expired ? ', expired' : ''}` : 'no lease'})`,
      );
  }
  for (const [k, ss] of byCall)
    if (ss.length > 1) v.push(`${k}: the side effect started ${ss.length} times (${ss.map((s) => s.workerId).join(', ')})`);
  return v;
}
