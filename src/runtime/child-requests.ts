import type { PendingRequest } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';
import { runStartEventId } from '../persistence/run-ids.js';
import type { CallControl, CallRuntime } from '../tools/call-runtime.js';
import type { ExecutionSession } from './execution-session.js';

/**
 * A child's request as its parent's: the same request, its path starting with the child (docs/agents.md,
 * "Requests from a child").
 */
export const throughChild = (childId: string, request: PendingRequest): PendingRequest => ({
  ...request,
  path: [childId, ...(request.path ?? [])],
});

/**
 * The answer the parent's respond gave to the request `questionId` child `childId` waits on, and
 * the child's attempt that takes it (`respond-<seq>`, the seq of the parent's record): recorded
 * in the parent's log (a respond attempt's run/start, `answered`) after the agent call's
 * `tool/call` (at `fromSeq`), the newest one — unless the child took it already (an earlier
 * request of the same id: a provider may number call ids per message), then none: the child's
 * request goes up again.
 */
export async function routedAnswer(
  store: EventStore,
  parent: { sessionId: string; fromSeq: number },
  child: { sessionId: string; runId: string; questionId: string },
): Promise<{ answer: unknown; attemptId: string } | undefined> {
  let found: { answer: unknown; attemptId: string } | undefined;
  for await (const e of store.readEvents(parent.sessionId, { fromSeq: parent.fromSeq })) {
    if (e.type !== 'run/start') continue;
    const a = e.payload.answered as { questionId: string; path: string[]; answer: unknown } | undefined;
    if (a && a.path[0] === child.sessionId && a.questionId === child.questionId)
      found = { answer: a.answer, attemptId: `respond-${e.seq}` };
  }
  if (found && (await store.getEventById(child.sessionId, runStartEventId(child.runId, found.attemptId)))) return undefined;
  return found;
}

/**
 * Makes the parent run's stop-after-round and detach requests (those made before the call too)
 * reach the child's run of `runId`: each is applied once that run's attempt has started (its
 * `run_start`), a stop as a stop request of the child's own (its idempotency key per attempt).
 * Returns the function that stops following.
 */
export function followControl(child: ExecutionSession, call: CallRuntime, runId: string): () => void {
  let epoch: number | undefined;
  const waiting: CallControl[] = [];
  const apply = (r: CallControl) => {
    if (r === 'detach') {
      child.requestDetach();
      return;
    }
    const request = {
      sessionId: child.sessionId,
      sessionInstanceId: child.sessionInstanceId,
      interactionId: runId,
      expectedRunEpoch: epoch!,
      idempotencyKey: `parent-stop-e${epoch}`,
    };
    // (an attempt that ended meanwhile has nothing to stop: the refusal says so, and is nothing to report)
    child.stopAfterCurrentToolRound(request).catch(() => undefined);
  };
  const sub = child.events$.subscribe((env) => {
    if (env.event.type !== 'run_start' || env.event.runId !== runId) return;
    epoch = env.event.runEpoch;
    for (const r of waiting.splice(0)) apply(r);
  });
  const off = call.onControl((r) => (epoch === undefined ? waiting.push(r) : apply(r)));
  return () => {
    off();
    sub.unsubscribe();
  };
}
