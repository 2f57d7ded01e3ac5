import type { ToolCallIntent } from '../contracts/calls.js';
import { z } from 'zod';
import { EventRecord, type PendingRequest } from '../contracts/events.js';
import { parseInput } from '../contracts/validate.js';
import { addUsage, zeroUsage, type Usage } from '../contracts/message.js';
import { resolutionOf, RunStatus, type UncertainCall } from '../contracts/requests.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { Reservation } from '../contracts/reservation.js';

/** What the log says about the run that is open (started, not settled). */
export interface OpenRunState {
  runId: string;
  turn: number;
  startSeq: number;
  /** Run epoch of the newest attempt. */
  runEpoch: number;
  attemptId: string;
  /** The newest step number written. */
  step: number;
  /** An approval or question still waiting for its answer, with the batch it holds back. */
  pending?: { pendingRequest: PendingRequest; batch: ToolCallIntent[]; step: number; seq: number };
  /** Status of the newest attempt's run/end, if it wrote one (suspended, detached, fenced). */
  lastEndStatus?: RunStatus;
  /** Accepted stop requests (steering/accepted) for this run. */
  stopAccepted: boolean;
  /**
   * A cancel recorded (`cancellation/requested`) after the run's newest `run/end`: its attempt
   * stopped before the cancelled end committed, so the run's next attempt starts cancelled.
   */
  cancelRequested?: { reason: string };
  /** tool/call intents without a tool/result. */
  unresolvedCalls: ToolCallIntent[];
  /**
   * Resources an unresolved call names that the app released (`resources/released`) after the
   * call's intent, by callId: when `continue` records the call uncertain, it does not lock them again.
   */
  releasedAfterIntent: Map<string, string[]>;
  /** The seq of each unresolved call's `tool/call` (the logSeq of its tool_start when it runs again). */
  callSeqs: Map<string, number>;
  /** final/message ids without a delivery event. */
  undeliveredFinals: { finalMessageId: string; content: string; output?: unknown; step: number }[];
  deliveredFinalIds: string[];
  deliveryUnknownFinalIds: string[];
  /**
   * Content of a `concludesTurn` result (not rejected by verification, DESIGN §4 item 5) whose
   * step ended with no final/message and no later model step: the run's answer, still to finalize.
   */
  concluded?: string;
  /**
   * Calls whose outcome was uncertain after a crash and that a later attempt resolved: a
   * tool/result written by a later attempt than the call's tool/call.
   */
  uncertainCalls: UncertainCall[];
  /**
   * The agent the run started with (its first run/start's `agent`): its budget is the run's for
   * every attempt, a handoff's target's included (DESIGN §4 item 8: budgets are per run).
   */
  agent?: string;
  /** The run's output schema as its run/start recorded it (docs/typed-output.md). */
  output?: { name: string; jsonSchema: Record<string, unknown>; digest: string; strict: boolean };
  /** What the run's earlier attempts spent, for its budgets (DESIGN §4 item 8: per run). */
  spent: {
    toolCalls: number;
    usage: Usage;
    modelUsages: Usage[];
    /** Calls counted at their reservation (failed attempts, crashed attempts' possibly-sent calls), to price. */
    reservations: Reservation[];
    /** Costs tool results recorded for their own work (agentTool child runs, priced by the child). */
    callCosts: string[];
    recoveries: number;
    corrections: number;
  };
}

/**
 * The request the open run waits for an answer to (it rests `suspended`): none when its cancel
 * stands — recorded as it suspended, the run is interrupted, and its next attempt ends it cancelled.
 */
export const awaitedRequest = <R>(open: { pending?: { pendingRequest: R }; cancelRequested?: unknown }): R | undefined =>
  open.cancelRequested === undefined ? open.pending?.pendingRequest : undefined;

/** A `cancellation/requested` payload's reason. */
const cancelOf = (p: Record<string, unknown>) => ({ reason: typeof p.reason === 'string' ? p.reason : 'cancelled' });

/**
 * Folds the events of the open run (read from its start seq, so O(run), not O(history)) into
 * what resuming it needs.
 */
export function foldOpenRun(events: readonly EventRecord[]): OpenRunState | undefined {
  return foldRunEvents(parseInput(z.array(EventRecord), events, 'foldOpenRun: events'));
}

/** foldOpenRun for records read from a store (already checked there). */
export function foldRunEvents(events: readonly EventRecord[]): OpenRunState | undefined {
  let st: OpenRunState | undefined;
  const calls = new Map<string, ToolCallIntent>();
  /** The attempt (run epoch) that wrote each call's intent. */
  const intentAttempts = new Map<string, number>();
  const finals = new Map<string, OpenRunState['undeliveredFinals'][number]>();
  // the newest step's concludesTurn content, and whether a verifier rejected any of its results
  let concluding: { step: number; content?: string; rejected: boolean } | undefined;
  // a cancel recorded ahead of the first run/start (its attempt was starting): that attempt's, if it is the one that starts
  let early: { reason: string; runId: unknown; attemptId: unknown } | undefined;
  for (const e of events) {
    const p = e.payload as Record<string, any>;
    if (!st && e.type === 'cancellation/requested') early = { ...cancelOf(p), runId: p.runId, attemptId: p.attemptId };
    if (!st && e.type === 'run/end') early = undefined;
    if (e.type === 'run/start') {
      if (!st || st.runId !== p.runId) {
        // another run's: nothing of the one before carries over
        calls.clear();
        intentAttempts.clear();
        finals.clear();
        concluding = undefined;
        st = {
          runId: p.runId,
          turn: e.turn,
          startSeq: e.seq,
          runEpoch: p.runEpoch,
          attemptId: p.attemptId,
          step: 0,
          stopAccepted: false,
          unresolvedCalls: [],
          releasedAfterIntent: new Map(),
          callSeqs: new Map(),
          undeliveredFinals: [],
          deliveredFinalIds: [],
          deliveryUnknownFinalIds: [],
          uncertainCalls: [],
          spent: { toolCalls: 0, usage: zeroUsage(), modelUsages: [], reservations: [], callCosts: [], recoveries: 0, corrections: 0 },
          ...(p.output ? { output: p.output } : {}),
          ...(typeof p.agent === 'string' ? { agent: p.agent } : {}),
          ...(early && early.runId === p.runId && early.attemptId === p.attemptId ? { cancelRequested: { reason: early.reason } } : {}),
        };
        early = undefined;
      } else {
        // a crashed attempt's possibly-sent call, counted at the reservation the next attempt recorded
        if (p.recoveredReservation) st.spent.reservations.push(p.recoveredReservation as Reservation);
        st.runEpoch = p.runEpoch;
        st.attemptId = p.attemptId;
        delete st.lastEndStatus;
        // a respond to a child's request: answered here (the agent call routes it down when it runs)
        if (p.answered && st.pending?.pendingRequest.questionId === p.answered.questionId) delete st.pending;
      }
      continue;
    }
    if (!st) continue;
    if (e.step > st.step) st.step = e.step;
    if (p.copiedFrom !== undefined) continue; // a compaction's copy: no new fact
    // a later step of the run (not a session-level event: inputs, state, releases are step 0)
    if (concluding && e.step > concluding.step) concluding = undefined;
    switch (e.type) {
      case 'approval/requested':
      case 'question/asked':
        st.pending = { pendingRequest: p.pendingRequest, batch: (p.batch ?? []) as ToolCallIntent[], step: e.step, seq: e.seq };
        break;
      case 'approval/decided':
        if (st.pending?.pendingRequest.questionId === p.questionId) delete st.pending;
        break;
      case 'tool/call':
        calls.set(p.callId, p as ToolCallIntent);
        intentAttempts.set(p.callId, e.attempt);
        st.callSeqs.set(p.callId, e.seq);
        st.spent.toolCalls++;
        break;
      case 'assistant/message':
      case 'compaction': // its summary call's usage counts too
        if (p.usage) {
          st.spent.usage = addUsage(st.spent.usage, p.usage as Usage);
          st.spent.modelUsages.push(p.usage as Usage);
        }
        // an answer whose usage never came back counts at its reservation
        if (p.counted === 'reservation' && p.reserved) st.spent.reservations.push(p.reserved as Reservation);
        break;
      case 'verification/rejected':
        // an answer that failed its output schema is a protocol correction, a verifier's rejection a recovery
        if (p.target === 'output') st.spent.corrections++;
        else st.spent.recoveries++;
        if (concluding?.step === e.step) concluding.rejected = true;
        break;
      case 'tool/batch-rejected':
        st.spent.corrections++;
        break;
      case 'tool/result': {
        const intent = calls.get(p.callId);
        // (a resumable call, an agentTool's, is resumed by a later attempt: never uncertain)
        if (intent && !intent.resumable && e.attempt > intentAttempts.get(p.callId)!) {
          st.uncertainCalls.push({
            name: intent.name,
            callId: intent.callId,
            mode: intent.mode,
            resolution: resolutionOf(intent.mode, p.outcome as ToolOutcome),
          });
        }
        calls.delete(p.callId);
        const o = p.outcome as ToolOutcome;
        // an agentTool's child run: its usage, cost and calls counted at reservation, once (its call's result)
        if ((o.kind === 'completed' || o.kind === 'cancelled') && o.usage) st.spent.usage = addUsage(st.spent.usage, o.usage);
        if ((o.kind === 'completed' || o.kind === 'cancelled') && o.cost) st.spent.callCosts.push(o.cost);
        if ((o.kind === 'completed' || o.kind === 'cancelled') && o.counted)
          st.spent.reservations.push({ inputTokens: 0, outputTokens: o.counted.outputTokens, cost: o.counted.cost });
        if (concluding?.step !== e.step) concluding = { step: e.step, rejected: false };
        if (o.kind === 'completed' && o.concludesTurn && concluding.content === undefined) concluding.content = o.content as string;
        if (st.pending?.pendingRequest.kind === 'question' && st.pending.pendingRequest.callId === p.callId) delete st.pending;
        break;
      }
      case 'steering/accepted':
        if ((p.request as { interactionId?: string }).interactionId === st.runId) st.stopAccepted = true;
        break;
      case 'final/message':
        concluding = undefined;
        finals.set(p.finalMessageId, {
          finalMessageId: p.finalMessageId,
          content: p.content,
          ...(p.output !== undefined ? { output: p.output } : {}),
          step: e.step,
        });
        break;
      case 'delivery/committed':
        finals.delete(p.finalMessageId);
        st.deliveredFinalIds.push(p.finalMessageId);
        break;
      case 'delivery/unknown':
        finals.delete(p.finalMessageId);
        st.deliveryUnknownFinalIds.push(p.finalMessageId);
        break;
      case 'cancellation/requested':
        st.cancelRequested = cancelOf(p);
        break;
      case 'run/end':
        {
          // the attempt that ended had the cancel (its end is what the cancel decided)
          delete st.cancelRequested;
          const status = RunStatus.safeParse(p.status);
          if (status.success) st.lastEndStatus = status.data;
          else delete st.lastEndStatus;
        }
        break;
      case 'resources/released':
        for (const c of calls.values()) releaseFor(st, c, p.keys as string[]);
        break;
      case 'agent/handoff':
        // the run's answer is the target agent's from here on (when it has an output schema)
        if (p.output) st.output = p.output;
        break;
      case 'assistant/attempt':
        // a failed attempt whose usage never came back counts at its reservation
        if (p.counted === 'reservation' && p.reserved) st.spent.reservations.push(p.reserved as Reservation);
        break;
      // nothing an open run's recovery needs: its inputs and steps are read elsewhere
      case 'approval/call-decided': // read by per-call approvals from the request's seq on
      case 'checkpoint/loaded':
      case 'input/accepted':
      case 'input/cancelled':
      case 'run/suspended':
      case 'session/attached':
      case 'state/updated':
      case 'step/end':
      case 'step/start':
      case 'user/message':
        break;
    }
  }
  if (st) {
    for (const id of [...st.releasedAfterIntent.keys()]) if (!calls.has(id)) st.releasedAfterIntent.delete(id);
    for (const id of [...st.callSeqs.keys()]) if (!calls.has(id)) st.callSeqs.delete(id);
    if (concluding?.content !== undefined && !concluding.rejected && calls.size === 0 && !st.pending) st.concluded = concluding.content;
    st.unresolvedCalls = [...calls.values()];
    st.undeliveredFinals = [...finals.values()];
  }
  return st;
}

/** Records that `keys` were released after the intent of `call` (those it names). */
export function releaseFor(st: OpenRunState, call: ToolCallIntent, keys: readonly string[]): void {
  const hit = call.resources.filter((r) => keys.includes(r));
  if (hit.length > 0) st.releasedAfterIntent.set(call.callId, [...new Set([...(st.releasedAfterIntent.get(call.callId) ?? []), ...hit])]);
}
