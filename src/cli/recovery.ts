import type { SessionHolder } from '../contracts/errors.js';
import type { RecoveryOutcome } from '../contracts/requests.js';
import type { RecoveryPreview } from '../runtime/recovery-preview.js';
import { command } from './invocation.js';
import type { SessionLease } from './session-lease.js';

/** A live holder as the summaries name it: `the live process pid 4242 on box (serving worker w1)`. */
export const holderName = (h: SessionHolder): string =>
  `the live process pid ${h.pid} on ${h.host}${h.workerId !== undefined ? ` (serving worker ${h.workerId})` : ''}`;

/**
 * Human lines saying what recovery found, starting with `recovery found: …` (a preview also names
 * the agent calls resumed and the final answers not delivered). `runningIn` names the live process
 * running the session (a preview of a session in use): its open run is in progress there, not stopped.
 */
export function describeRecovery(
  r: RecoveryOutcome & Partial<Pick<RecoveryPreview, 'resumedAgentCalls' | 'undeliveredFinalIds'>>,
  options: { runningIn?: string } = {},
): string[] {
  const runs = r.interruptedRuns;
  const undelivered = r.undeliveredFinalIds ?? [];
  const lines: string[] = [];
  if (
    runs.length === 0 &&
    r.uncertainToolCalls.length === 0 &&
    r.deliveryUnknownFinalIds.length === 0 &&
    undelivered.length === 0 &&
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
          : options.runningIn !== undefined
            ? `running now in ${options.runningIn}, not stopped`
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
  if (undelivered.length) {
    lines.push(
      `  final answers committed, not delivered: ${undelivered.join(', ')} ` +
        '(opening delivers them again to an idempotent delivery owner, else records their delivery unknown)',
    );
  }
  if (r.deliveredFinalIds.length) lines.push(`  final answers delivered: ${r.deliveredFinalIds.join(', ')}`);
  return lines;
}

/**
 * Lines naming who holds a session a preview read (docs/cli.md, `recover`): a live process running
 * it (`demo --session` is refused meanwhile, `recover --resume` fences it) and a serving worker's
 * unexpired lease (`recover --resume` is refused while it lasts). `hints` are the commands that
 * would open it (`recover … --resume`, `demo --session …`; a child session's: its root's resume only).
 */
export function describeHold(
  sessionId: string,
  holder: SessionHolder | undefined,
  lease: SessionLease | undefined,
  hints: { resume: string; demo?: string },
): string[] {
  const lines: string[] = [];
  const resume = `\`${command(hints.resume)}\``;
  if (holder) {
    const refused = hints.demo !== undefined ? `\`${command(hints.demo)}\` is refused while it runs` : 'its run goes on there';
    lines.push(`session ${sessionId} is held by ${holderName(holder)}: ${refused}${lease ? '' : `, ${resume} fences it`}`);
  }
  if (lease) {
    lines.push(
      `session ${sessionId} is held by serving worker ${lease.workerId} under a lease until ${lease.leaseUntil ?? 'unknown'}: ` +
        `${resume} refuses while it lasts (with --force it fences the worker)`,
    );
  }
  return lines;
}
