import { notRunResult, storedResult, type ExecutionResult, type InputReceipt } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import { UNSETTLED_END_STATUSES } from '../persistence/head.js';
import { runEndEventId, runOpenEventId, runStartEventId } from '../persistence/run-ids.js';

/** An attempt's ends that leave its run open for a later attempt to settle. */
const INTERRUPTED: ReadonlySet<string> = new Set(['detached', 'fenced']);

/**
 * DESIGN §6: an attempt already recorded returns its result; an interrupted one (no run/end, or
 * one saying `detached` or `fenced`) returns the run's settled result if the run has settled
 * since (through a later attempt), else its own `detached` result naming the interruption.
 */
export async function recordedResult(
  store: EventStore,
  sessionId: string,
  runId: string,
  attemptId: string,
  openRunId: string | undefined,
): Promise<ExecutionResult | undefined> {
  const end = await store.getEventById(sessionId, runEndEventId(runId, attemptId));
  // an attempt that ended settled, or suspended (its own result), or interrupted in a run still open
  if (end && (!INTERRUPTED.has(String(end.payload.status)) || openRunId === runId)) return storedResult(end.payload.result);
  let start = end ?? (await store.getEventById(sessionId, runStartEventId(runId, attemptId)));
  if (!start) {
    const opened = await store.getEventById(sessionId, runOpenEventId(runId));
    if (opened?.payload.attemptId === attemptId) start = opened;
  }
  if (!start) return undefined;
  if (openRunId !== runId) {
    // the run is not open any more: the attempt that settled it comes after this one
    for await (const e of store.readEvents(sessionId, { fromSeq: start.seq })) {
      if (e.type === 'run/end' && e.payload.runId === runId && !UNSETTLED_END_STATUSES.has(String(e.payload.status)))
        return storedResult(e.payload.result);
    }
  }
  if (end) return storedResult(end.payload.result); // (a log whose run was ended otherwise)
  return notRunResult(
    { runId, attemptId },
    'detached',
    `attempt ${attemptId} of run ${runId} was interrupted before it settled; continue the run with a new attempt`,
  );
}

/**
 * The result of an attempt that did not start because the session's log could not be read: a
 * result, not a rejection (DESIGN §6), `error.cause` the read's error; nothing started or was
 * written, the same request can be executed again.
 */
export const unreadLogResult = (req: { runId: string; attemptId: string }, e: unknown): ExecutionResult => {
  const result = notRunResult(
    req,
    'failed',
    `the attempt did not start: reading the session's log failed (${(e as Error)?.message ?? String(e)}); execute it again`,
  );
  // the store's typed error as the cause (isStoreUnavailableError tells a retryable read)
  return { ...result, error: { ...result.error!, cause: e }, historyConsistent: true };
};

/** The receipt of an input in the log that is no longer pending. */
export async function settledInputReceipt(store: EventStore, sessionId: string, inputId: string): Promise<InputReceipt> {
  let cancelled = (await store.getEventById(sessionId, `input-cancelled:${inputId}`)) !== undefined;
  if (!cancelled) {
    // a log from before input-cancelled ids: what came first after the input, its cancel or its use
    const accepted = await store.getEventById(sessionId, `input:${inputId}`);
    if (accepted) {
      for await (const e of store.readEvents(sessionId, { fromSeq: accepted.seq + 1 })) {
        if (e.payload.inputId !== inputId) continue;
        if (e.type === 'input/cancelled') cancelled = true;
        if (e.type === 'input/cancelled' || e.type === 'user/message' || e.type === 'run/start') break;
      }
    }
  }
  return { inputId, status: cancelled ? 'cancelled' : 'consumed', durability: 'durable' };
}

/** The result recorded for `req`'s attempt, if any; a log that cannot be read now: none, or (`failed`) a failed result. */
export function recordedOrUnread(
  store: EventStore,
  sessionId: string,
  openRunId: string | undefined,
  req: { runId: string; attemptId: string },
  unread?: 'failed',
): Promise<ExecutionResult | undefined> {
  const recorded = recordedResult(store, sessionId, req.runId, req.attemptId, openRunId);
  return recorded.catch((e: unknown) => (unread ? unreadLogResult(req, e) : undefined));
}
