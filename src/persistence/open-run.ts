import { z } from 'zod';
import { own, ownRecord } from '../contracts/keyed.js';
import { EventRecord, type PendingRequest } from '../contracts/events.js';
import { parseInput } from '../contracts/validate.js';
import { addUsage, zeroUsage, type Usage } from '../contracts/message.js';
import type { CallDescr } from '../actors/model-step.js';

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
  pending?: { pendingRequest: PendingRequest; batch: CallDescr[]; step: number; seq: number };
  /** Status of the newest attempt's run/end, if it wrote one (suspended, detached, fenced). */
  lastEndStatus?: string;
  /** Accepted stop requests (steering/accepted) for this run. */
  stopAccepted: boolean;
  /** tool/call intents without a tool/result. */
  unresolvedCalls: CallDescr[];
  /**
   * Resources an unresolved call names that the app released (`resources/released`) after the
   * call's intent, by callId: when `continue` records the call uncertain, it does not lock them again.
   * (Both records keyed by call ids have no prototype: read them with `Object.hasOwn`.)
   */
  releasedAfterIntent: Record<string, string[]>;
  /** The seq of each unresolved call's `tool/call` (the logSeq of its tool_start when it runs again). */
  callSeqs: Record<string, number>;
  /** final/message ids without a delivery event. */
  undeliveredFinals: { finalMessageId: string; content: string; step: number }[];
  deliveredFinalIds: string[];
  deliveryUnknownFinalIds: string[];
  /**
   * Content of a `concludesTurn` result (not rejected by verification, DESIGN §4 item 5) whose
   * step ended with no final/message and no later model step: the run's answer, still to finalize.
   */
  concluded?: string;
  /** What the run's earlier attempts spent, for its budgets (DESIGN §4 item 8: per run). */
  spent: { toolCalls: number; usage: Usage; modelUsages: Usage[]; recoveries: number; corrections: number };
}

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
  const calls = new Map<string, CallDescr>();
  const finals = new Map<string, { finalMessageId: string; content: string; step: number }>();
  // the newest step's concludesTurn content, and whether a verifier rejected any of its results
  let concluding: { step: number; content?: string; rejected: boolean } | undefined;
  for (const e of events) {
    const p = e.payload as Record<string, any>;
    if (e.type === 'run/start') {
      if (!st || st.runId !== p.runId) {
        st = {
          runId: p.runId,
          turn: e.turn,
          startSeq: e.seq,
          runEpoch: p.runEpoch,
          attemptId: p.attemptId,
          step: 0,
          stopAccepted: false,
          unresolvedCalls: [],
          releasedAfterIntent: ownRecord(),
          callSeqs: ownRecord(),
          undeliveredFinals: [],
          deliveredFinalIds: [],
          deliveryUnknownFinalIds: [],
          spent: { toolCalls: 0, usage: zeroUsage(), modelUsages: [], recoveries: 0, corrections: 0 },
        };
      } else {
        st.runEpoch = p.runEpoch;
        st.attemptId = p.attemptId;
        delete st.lastEndStatus;
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
        st.pending = { pendingRequest: p.pendingRequest, batch: (p.batch ?? []) as CallDescr[], step: e.step, seq: e.seq };
        break;
      case 'approval/decided':
        if (st.pending?.pendingRequest.questionId === p.questionId) delete st.pending;
        break;
      case 'tool/call':
        calls.set(p.callId, p as CallDescr);
        st.callSeqs[p.callId] = e.seq;
        st.spent.toolCalls++;
        break;
      case 'assistant/message':
      case 'compaction': // its summary call's usage counts too
        if (p.usage) {
          st.spent.usage = addUsage(st.spent.usage, p.usage as Usage);
          st.spent.modelUsages.push(p.usage as Usage);
        }
        break;
      case 'verification/rejected':
        st.spent.recoveries++;
        if (concluding?.step === e.step) concluding.rejected = true;
        break;
      case 'tool/batch-rejected':
        st.spent.corrections++;
        break;
      case 'tool/result': {
        calls.delete(p.callId);
        const o = p.outcome as { kind: string; concludesTurn?: boolean; content?: string };
        if (concluding?.step !== e.step) concluding = { step: e.step, rejected: false };
        if (o.kind === 'completed' && o.concludesTurn && concluding.content === undefined) concluding.content = o.content;
        if (st.pending?.pendingRequest.kind === 'question' && st.pending.pendingRequest.callId === p.callId) delete st.pending;
        break;
      }
      case 'steering/accepted':
        if ((p.request as { interactionId?: string }).interactionId === st.runId) st.stopAccepted = true;
        break;
      case 'final/message':
        concluding = undefined;
        finals.set(p.finalMessageId, { finalMessageId: p.finalMessageId, content: p.content, step: e.step });
        break;
      case 'delivery/committed':
        finals.delete(p.finalMessageId);
        st.deliveredFinalIds.push(p.finalMessageId);
        break;
      case 'delivery/unknown':
        finals.delete(p.finalMessageId);
        st.deliveryUnknownFinalIds.push(p.finalMessageId);
        break;
      case 'run/end':
        st.lastEndStatus = p.status;
        break;
      case 'resources/released':
        for (const c of calls.values()) releaseFor(st, c, p.keys as string[]);
        break;
    }
  }
  if (st) {
    for (const id of Object.keys(st.releasedAfterIntent)) if (!calls.has(id)) delete st.releasedAfterIntent[id];
    for (const id of Object.keys(st.callSeqs)) if (!calls.has(id)) delete st.callSeqs[id];
    if (concluding?.content !== undefined && !concluding.rejected && calls.size === 0 && !st.pending) st.concluded = concluding.content;
    st.unresolvedCalls = [...calls.values()];
    st.undeliveredFinals = [...finals.values()];
  }
  return st;
}

/** Records that `keys` were released after the intent of `call` (those it names). */
export function releaseFor(st: OpenRunState, call: CallDescr, keys: readonly string[]): void {
  const hit = call.resources.filter((r) => keys.includes(r));
  if (hit.length > 0) st.releasedAfterIntent[call.callId] = [...new Set([...(own(st.releasedAfterIntent, call.callId) ?? []), ...hit])];
}
