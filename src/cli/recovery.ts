import type { RecoveryOutcome } from '../contracts/requests.js';
import type { RecoveryPreview } from '../runtime/recovery-preview.js';

/** Human lines saying what recovery found, starting with `recovery found: …` (a preview also names the agent calls resumed). */
export function describeRecovery(r: RecoveryOutcome & Partial<Pick<RecoveryPreview, 'resumedAgentCalls'>>): string[] {
  const runs = r.interruptedRuns;
  const lines: string[] = [];
  if (
    runs.length === 0 &&
    r.uncertainToolCalls.length === 0 &&
    r.deliveryUnknownFinalIds.length === 0 &&
    r.activeResourceLocks.length === 0
  ) {
    lines.push(`recovery found: nothing to resume (writer epoch ${r.writerEpoch})`);
  } else {
    lines.push(`recovery found: ${runs.length} interrupted run${runs.length === 1 ? '' : 's'} (writer epoch ${r.writerEpoch})`);
  }
  for (const run of runs) {
    const why = run.cancelRequested
      ? `cancelled (${run.cancelRequested.reason}) before it ended: a continue ends it cancelled, starting no call again`
      : run.pendingRequest
        ? 'waiting for an answer'
        : run.lastStatus
          ? `last attempt ended ${run.lastStatus}`
          : 'its process stopped mid-run';
    lines.push(
      `  interrupted run ${run.runId} (turn ${run.turn}, attempt ${run.attemptId}, run epoch ${run.runEpoch}): ` +
        `${why}${run.stopAccepted ? '; a stop request is accepted' : ''}`,
    );
  }
  for (const c of r.uncertainToolCalls) {
    const what = {
      rerun: 'side-effect free: will run again',
      skipped: 'side-effect free: will not run again (its arguments no longer fit, or a resource it names stays locked)',
      reconcile: "its tool's reconcile() decides what happened",
      'uncertain-hanging': 'no reconcile: recorded uncertain, its locks stay held',
    }[c.resolution];
    lines.push(`  tool call without a result: ${c.name} ${c.callId} [${c.mode}] → ${c.resolution} (${what})`);
  }
  for (const c of r.resumedAgentCalls ?? []) {
    lines.push(
      `  agent call without a result: ${c.name} ${c.callId} → resumed (agent call: its child run goes on in session ${c.childSessionId})`,
    );
  }
  if (r.activeResourceLocks.length) lines.push(`  resource locks held: ${r.activeResourceLocks.join(', ')}`);
  if (r.deliveryUnknownFinalIds.length) lines.push(`  final answers with unknown delivery: ${r.deliveryUnknownFinalIds.join(', ')}`);
  if (r.deliveredFinalIds.length) lines.push(`  final answers delivered: ${r.deliveredFinalIds.join(', ')}`);
  return lines;
}
