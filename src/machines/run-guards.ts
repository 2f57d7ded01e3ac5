import type { CallModelOutput } from '../actors/call-model.js';
import type { CommitIntentOutput } from '../actors/commit-intent.js';
import type { CommitResultsOutput } from '../actors/commit-results.js';
import type { DeliverFinalOutput, VerifyFinalOutput } from '../actors/final-answer.js';
import type { PrepareContextOutput } from '../actors/prepare-context.js';
import type { StartRunOutput } from '../actors/start-run.js';
import { isRateLimitDeadline } from '../actors/rate-limit-call.js';
import { isStoppedWaiting } from '../actors/wait-stops.js';
import type { RunContext, RunEvent } from './run-context.js';
import { outputOf, spentNow } from './run-decisions.js';

type GuardArgs = { context: RunContext; event: RunEvent };

/** Ends a cancel that comes before the run settles turns into `cancelled` (a fenced writer commits nothing either way). */
const LEFT_OPEN: ReadonlySet<string> = new Set(['suspended', 'detached']);

/** The run machine's guards, by name: pure reads of its context or of the event that decides. */
export const runGuards = {
  stopRequested: ({ context }: GuardArgs) => context.stopRequested,
  cancelRequested: ({ context }: GuardArgs) => context.cancelRequested,
  detachRequested: ({ context }: GuardArgs) => context.detachRequested,
  budgetSpent: ({ context }: GuardArgs) => spentNow(context) !== undefined,
  rateLimitDeadline: ({ event }: GuardArgs) => isRateLimitDeadline((event as { error?: unknown }).error),
  stoppedWaiting: ({ event }: GuardArgs) => isStoppedWaiting((event as { error?: unknown }).error),
  resumedWithCalls: ({ event }: GuardArgs) => (outputOf<StartRunOutput>(event).resumed?.calls.length ?? 0) > 0,
  resumedWithResultsOnly: ({ event }: GuardArgs) => outputOf<StartRunOutput>(event).resumed !== undefined,
  concludedBefore: ({ context }: GuardArgs) => context.concluded !== undefined,
  pricingFailed: ({ event }: GuardArgs) => outputOf<PrepareContextOutput>(event).pricingError !== undefined,
  summaryUnaffordable: ({ event }: GuardArgs) => outputOf<PrepareContextOutput>(event).unaffordable !== undefined,
  contextTooLarge: ({ event }: GuardArgs) => outputOf<PrepareContextOutput>(event).overflow !== undefined,
  contextUnprepared: ({ event }: GuardArgs) => outputOf<CallModelOutput>(event).kind === 'unprepared',
  callUnaffordable: ({ event }: GuardArgs) => outputOf<CallModelOutput>(event).kind === 'unaffordable',
  askedForTools: ({ event }: GuardArgs) => outputOf<CallModelOutput>(event).kind === 'toolCalls',
  answerRefused: ({ event }: GuardArgs) => outputOf<CallModelOutput>(event).kind === 'refused',
  intentRejected: ({ event }: GuardArgs) => outputOf<CommitIntentOutput>(event).kind === 'rejected',
  correctionsExhausted: ({ context }: GuardArgs) => context.corrections > context.maxProtocolCorrections,
  intentBlocked: ({ event }: GuardArgs) => outputOf<CommitIntentOutput>(event).kind === 'blocked',
  intentSuspended: ({ event }: GuardArgs) => outputOf<CommitIntentOutput>(event).kind === 'suspended',
  /** A cancel that came while the step's request (an approval, a question) was committed: the run settles instead of waiting. */
  cancelledWhileSuspending: ({ context, event }: GuardArgs) =>
    context.cancelRequested && outputOf<CommitIntentOutput>(event).kind === 'suspended',
  toolConcluded: ({ event }: GuardArgs) => outputOf<CommitResultsOutput>(event).concluded !== undefined,
  callsUnsettled: ({ event }: GuardArgs) => outputOf<CommitResultsOutput>(event).unsettled !== undefined,
  /** A cancel that came while an end that leaves the run open (suspended, detached) waited for the step's results to land. */
  cancelledWhileOpen: ({ context }: GuardArgs) => context.cancelRequested && context.end !== undefined && LEFT_OPEN.has(context.end.status),
  finalRejected: ({ event }: GuardArgs) => outputOf<VerifyFinalOutput>(event).kind === 'rejected',
  outputRejected: ({ event }: GuardArgs) => outputOf<VerifyFinalOutput>(event).kind === 'output_rejected',
  delivered: ({ event }: GuardArgs) => outputOf<DeliverFinalOutput>(event).kind === 'delivered',
  endDecided: ({ context }: GuardArgs) => context.end !== undefined,
  /** The run ends cancelled, its run/start committed: its agent calls' open children are cancelled before its end. */
  endsCancelled: ({ context }: GuardArgs) => context.end?.status === 'cancelled' && context.runStartSeq > 0,
};
