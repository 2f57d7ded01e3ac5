import { randomUUID } from 'node:crypto';
import type { CancelChildrenInput, CascadeParent, ChildOfCall, RunChildren } from '../actors/run-children.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import { CHILD_RUN, childSessionId, spendingOf, type ChildHost } from './agent-calls.js';
import { isBusy } from '../actors/worker-services.js';
import { currentRunResult } from './wait-for-result.js';
import type { ExecutionSession } from './execution-session.js';

/** An agent call of a run, as its `tool/call` record has it. */
interface AgentCall {
  callId: string;
  idempotencyKey: string;
  seq: number;
}

/** The agent calls (resumable tools) whose intents the run's log holds from `fromSeq` on. */
async function agentCallsOf(store: EventStore, sessionId: string, fromSeq: number): Promise<AgentCall[]> {
  const calls: AgentCall[] = [];
  for await (const e of store.readEvents(sessionId, { fromSeq })) {
    if (e.type !== 'tool/call' || e.payload.resumable !== true) continue;
    const { callId, idempotencyKey } = e.payload as { callId: string; idempotencyKey: string };
    calls.push({ callId, idempotencyKey, seq: e.seq });
  }
  return calls;
}

/**
 * The run's agent calls, read up to three times: a log that cannot be read finds none (the run's
 * end then names each call it answers as leaving its child's run open).
 */
async function readAgainOnFailure(read: () => Promise<AgentCall[]>): Promise<AgentCall[]> {
  for (let tries = 1; ; tries++) {
    try {
      return await read();
    } catch {
      if (tries >= 3) return [];
    }
  }
}

/** The parent writer's hold, read again (a writer another process fenced learns it here). */
async function holds(parent: CascadeParent): Promise<boolean> {
  const fenced = parent.writer.fencedNow() ?? (await parent.writer.checkFenced());
  return !fenced && parent.writer.mayStartEffect();
}

/**
 * Ends a child's open run `cancelled` as the inbox's cancel ends any run nobody runs: an attempt
 * that starts cancelled (its run/start, then run/end cancelled) — no model call, no tool of it
 * runs (an agent call of its own is cancelled the same way, one level down).
 */
async function cancelOpenRun(child: ExecutionSession): Promise<ExecutionResult> {
  // (the cancel reaches the attempt while it is prepared: execute sends it to the session at once)
  const result = child.execute({ kind: 'continue', runId: CHILD_RUN, attemptId: `cancel-${randomUUID()}` });
  result.catch(() => undefined); // (its refusal is the caller's, below)
  await child.requestCancel('the parent run was cancelled');
  return result;
}

/**
 * A cancelled run's children (docs/agents.md, "Control"): each agent call of the run whose child
 * session's run is still open (suspended, detached, interrupted) has it ended `cancelled` — before
 * the parent's run/end is committed, so that a crash in between redoes it with the parent's
 * cancel; a child whose run has ended is left as it is. The parent's writer is read right before
 * each child is opened and again before its cancel (after the last await): a fenced parent touches
 * no child (the writer that took it over owns them). The children are opened in this runtime, under
 * the parent writer's guard, as the parent's calls open them — also one opened with no run yet,
 * whose opener may have its run/start in flight: attached here, that append is refused, so that
 * "never started" is said of what the log holds for good.
 */
async function cancelOpen(host: ChildHost, parent: CascadeParent, input: CancelChildrenInput, signal: AbortSignal): Promise<ChildOfCall[]> {
  const out: ChildOfCall[] = [];
  for (const call of await readAgainOnFailure(() => agentCallsOf(host.store, parent.sessionId, input.fromSeq))) {
    const childId = childSessionId({ sessionId: parent.sessionId, idempotencyKey: call.idempotencyKey });
    const answering = input.answering.includes(call.callId);
    const at = { callId: call.callId, childId };
    try {
      const head = await host.store.getHead(childId);
      const settled = head && head.openRun?.runId !== CHILD_RUN ? await currentRunResult(host.store, childId, CHILD_RUN) : undefined;
      if (!head || settled) {
        // settled before: nothing to cancel. Never opened: a writer that opens it later reads the
        // parent's hold again once it has (before the child's run starts), and finds it lost
        out.push(settledOrNot(at, settled, answering));
        continue;
      }
      if (!(await holds(parent)) || signal.aborted) return out;
      const link = { sessionId: parent.sessionId, runId: input.runId, callId: call.callId, seq: call.seq };
      // open, or opened with no run yet: the writer that opened it may still have its run/start in
      // flight (its process paused) — attaching here refuses that append, and the log read after it
      // says which, for good
      const child = await host.open(childId, undefined, link, { lost: () => parent.writer.effectRefusal() });
      try {
        if ((await host.store.getHead(childId))?.openRun?.runId !== CHILD_RUN) {
          // not open: it ended meanwhile (its opener ran on), or never started — for good, unless the
          // open found it live in this runtime (no new writer attached) with an attempt under way
          const ended = await currentRunResult(host.store, childId, CHILD_RUN);
          const startingHere = !ended && child.recovery.writerEpoch <= head.writerEpoch && isBusy(child);
          out.push(
            startingHere
              ? { ...at, became: 'left open', why: 'its run is being started in this process' }
              : settledOrNot(at, ended, answering),
          );
          continue;
        }
        // the last check before the child's attempt starts, after the last await
        if (!parent.writer.mayStartEffect() || signal.aborted) return out;
        const r = await cancelOpenRun(child);
        const ended = r.checkpointCommitted && r.status === 'cancelled';
        out.push({
          ...at,
          became: ended ? 'cancelled' : 'left open',
          status: r.status,
          ...(ended ? {} : { why: r.error?.message ?? `its cancel attempt ended ${r.status}` }),
          // (a run left open is counted by whoever continues it: never here too)
          ...(answering && ended ? { spending: spendingOf(r, childId) } : {}),
        });
      } finally {
        await child.close();
      }
    } catch (e) {
      out.push({ ...at, became: 'left open', why: e instanceof Error ? e.message : String(e) });
    }
  }
  return out;
}

/** A child with no open run: `settled` (its figures for a call answered now), or one that never started its run. */
function settledOrNot(at: { callId: string; childId: string }, settled: ExecutionResult | undefined, answering: boolean): ChildOfCall {
  if (!settled) return at;
  return answering ? { ...at, became: 'settled', status: settled.status, spending: spendingOf(settled, at.childId) } : at;
}

/** The runtime's side of a cancel cascade, opening children through `host`. */
export const runChildrenOf = (host: ChildHost): RunChildren => ({
  cancelOpen: (parent, input, signal) => cancelOpen(host, parent, input, signal),
});
