import type { ExecutionSession } from '../actors/execution-session.js';
import type { EventRecord } from '../contracts/events.js';
import type { RecoveryOutcome } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import { foldOpenRun } from '../persistence/open-run.js';
import type { AnyTool } from '../tools/define-tool.js';

/** A RecoveryOutcome, and whether the CLI had to compute it itself. */
export interface Recovered {
  recovery: RecoveryOutcome;
  /** True when the session exposes no `recovery` and the CLI folded the open run itself. */
  computedByCli: boolean;
}

/**
 * What opening the session found (DESIGN §5): `session.recovery`. A build whose session does not
 * expose it yet gets the part the CLI can fold from the log's open run (resource locks held by
 * older runs are then not listed).
 */
export async function recoveryOf(session: ExecutionSession, store: EventStore, tools: readonly AnyTool[]): Promise<Recovered> {
  const own = (session as unknown as { recovery?: RecoveryOutcome }).recovery;
  if (own) return { recovery: own, computedByCli: false };
  const head = await store.getHead(session.sessionId);
  const events: EventRecord[] = [];
  if (head?.openRun) for await (const e of store.readEvents(session.sessionId, { fromSeq: head.openRun.startSeq })) events.push(e);
  const open = foldOpenRun(events);
  const byName = new Map(tools.map((t) => [t.name, t]));
  const recovery: RecoveryOutcome = {
    sessionId: session.sessionId,
    writerEpoch: Math.max(1, head?.writerEpoch ?? 1),
    interruptedRuns: open
      ? [
          {
            runId: open.runId,
            turn: open.turn,
            runEpoch: open.runEpoch,
            attemptId: open.attemptId,
            ...(open.lastEndStatus ? { lastStatus: open.lastEndStatus } : {}),
            ...(open.pending ? { pendingRequest: open.pending.pendingRequest } : {}),
            stopAccepted: open.stopAccepted,
          },
        ]
      : [],
    deliveredFinalIds: [],
    deliveryUnknownFinalIds: open ? open.undeliveredFinals.map((f) => f.finalMessageId) : [],
    activeResourceLocks: [],
    uncertainToolCalls: (open?.unresolvedCalls ?? []).map((c) => ({
      runId: open!.runId,
      callId: c.callId,
      name: c.name,
      mode: c.mode,
      idempotencyKey: c.idempotencyKey,
      resolution: c.mode === 'parallel' ? ('rerun' as const) : byName.get(c.name)?.reconcile ? ('reconcile' as const) : ('uncertain-hanging' as const),
    })),
  };
  return { recovery, computedByCli: true };
}

/** Human lines saying what recovery found, starting with `recovery found: …`. */
export function describeRecovery({ recovery: r, computedByCli }: Recovered): string[] {
  const runs = r.interruptedRuns;
  const lines: string[] = [];
  if (runs.length === 0 && r.uncertainToolCalls.length === 0 && r.deliveryUnknownFinalIds.length === 0 && r.activeResourceLocks.length === 0) {
    lines.push(`recovery found: nothing to resume (writer epoch ${r.writerEpoch})`);
  } else {
    lines.push(`recovery found: ${runs.length} interrupted run${runs.length === 1 ? '' : 's'} (writer epoch ${r.writerEpoch})`);
  }
  for (const run of runs) {
    const why = run.pendingRequest ? 'waiting for an answer' : run.lastStatus ? `last attempt ended ${run.lastStatus}` : 'its process stopped mid-run';
    lines.push(`  interrupted run ${run.runId} (turn ${run.turn}, attempt ${run.attemptId}, run epoch ${run.runEpoch}): ${why}${run.stopAccepted ? '; a stop request is accepted' : ''}`);
  }
  for (const c of r.uncertainToolCalls) {
    const what = { rerun: 'side-effect free: will run again', reconcile: 'exclusive: its reconcile() decides what happened', 'uncertain-hanging': 'exclusive, no reconcile: recorded uncertain, its locks stay held' }[c.resolution];
    lines.push(`  tool call without a result: ${c.name} ${c.callId} [${c.mode}] → ${c.resolution} (${what})`);
  }
  if (r.activeResourceLocks.length) lines.push(`  resource locks held: ${r.activeResourceLocks.join(', ')}`);
  if (r.deliveryUnknownFinalIds.length) lines.push(`  final answers with unknown delivery: ${r.deliveryUnknownFinalIds.join(', ')}`);
  if (r.deliveredFinalIds.length) lines.push(`  final answers delivered: ${r.deliveredFinalIds.join(', ')}`);
  if (computedByCli) lines.push('  (computed by the CLI from the open run: this build has no session.recovery)');
  return lines;
}
