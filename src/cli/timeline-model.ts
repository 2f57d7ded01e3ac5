import { addDecimal } from '../contracts/budget.js';
import { isDecimal } from '../contracts/config.js';
import type { EventRecord } from '../contracts/events.js';
import type { ToolOutcome } from '../contracts/tools.js';
import { childSessionId } from '../runtime/agent-calls.js';
import { summarize } from './format.js';

/** A bar: something that lasted (a run, an attempt, a step, a model call, a tool call). */
export interface Span {
  row: 'run' | 'attempt' | 'step' | 'model' | 'tool';
  start: number;
  end: number;
  label: string;
  /** CSS classes besides `bar` and the row name: status and outcome classes. */
  classes: string[];
  /** The log seqs behind it (clicking shows their payloads). */
  seqs: number[];
  title: string;
  /** For tools: the lane (row) after packing overlapping calls. */
  lane?: number;
}

/** A point in time: approvals, compactions, deliveries, finals, attaches, cancellations… */
export interface Mark {
  at: number;
  kind: string;
  label: string;
  classes: string[];
  seqs: number[];
  title: string;
}

export interface TimelineModel {
  sessionId: string;
  spans: Span[];
  marks: Mark[];
  toolLanes: number;
  t0: number;
  t1: number;
}

const MARK_TYPES: Record<string, { kind: string; label: string; extra?: string }> = {
  'session/attached': { kind: 'attach', label: 'attached' },
  'approval/requested': { kind: 'approval', label: 'approval?' },
  'approval/decided': { kind: 'approval', label: 'decided' },
  'approval/call-decided': { kind: 'approval', label: 'call decided' },
  'question/asked': { kind: 'approval', label: 'question?' },
  compaction: { kind: 'compaction', label: 'compaction' },
  'checkpoint/loaded': { kind: 'compaction', label: 'checkpoint' },
  'final/message': { kind: 'final', label: 'final' },
  'delivery/committed': { kind: 'delivery', label: 'delivered' },
  'delivery/unknown': { kind: 'delivery', label: 'delivery unknown', extra: 'unknown' },
  'cancellation/requested': { kind: 'cancel', label: 'cancel' },
  'steering/accepted': { kind: 'steering', label: 'stop after round' },
  'input/accepted': { kind: 'input', label: 'input' },
  'input/cancelled': { kind: 'input', label: 'input cancelled' },
  'tool/batch-rejected': { kind: 'rejected', label: 'batch rejected', extra: 'problem' },
  'verification/rejected': { kind: 'rejected', label: 'verifier rejected', extra: 'problem' },
  'run/suspended': { kind: 'approval', label: 'suspended' },
  'resources/released': { kind: 'steering', label: 'locks released' },
  'agent/handoff': { kind: 'steering', label: 'handoff' },
};

const ms = (e: EventRecord) => Date.parse(e.occurredAt);

/** The CSS classes of a tool outcome: `outcome-<kind>` plus `error`, `uncertain`, `cancelled`. */
export function outcomeClasses(o: ToolOutcome | undefined): string[] {
  if (!o) return ['outcome-unresolved', 'uncertain'];
  const c = [`outcome-${o.kind}`];
  if (o.kind === 'completed' && o.isError) c.push('error');
  if (o.kind.startsWith('uncertain')) c.push('uncertain');
  if (o.kind === 'cancelled') c.push('cancelled');
  return c;
}

/** Packs intervals into the fewest lanes so that none overlap in a lane (greedy, by start). */
function pack(spans: Span[]): number {
  const laneEnds: number[] = [];
  for (const s of [...spans].sort((a, b) => a.start - b.start || a.end - b.end)) {
    let lane = laneEnds.findIndex((end) => end <= s.start);
    if (lane < 0) lane = laneEnds.push(0) - 1;
    laneEnds[lane] = s.end;
    s.lane = lane;
  }
  return Math.max(1, laneEnds.length);
}

/**
 * Turns a session's events into bars and marks. Times are epoch ms: a run from its first
 * `run/start` to its settling `run/end`; an attempt from its `run/start` to its `run/end` or, if
 * it has none (its process stopped), its last event; a step from its model call's start to
 * `step/end`; a model call `latencyMs` before its `assistant/message`; a tool call from
 * `startedAt` (or its `tool/call`) to `endedAt` (or its `tool/result`). A tool call without a
 * result is drawn to the end of its attempt, classed `outcome-unresolved uncertain`.
 */
export function buildTimeline(sessionId: string, events: readonly EventRecord[]): TimelineModel {
  const spans: Span[] = [];
  const marks: Mark[] = [];
  const runOfTurn = new Map<number, string>();
  const attemptEnd = new Map<string, number>(); // `${turn}:${attempt}` → last event time
  for (const e of events) {
    if (e.type === 'run/start' && !runOfTurn.has(e.turn)) runOfTurn.set(e.turn, String(e.payload.runId));
    if (e.turn > 0 && e.payload.copiedFrom === undefined) {
      const k = `${e.turn}:${e.attempt}`;
      attemptEnd.set(k, Math.max(attemptEnd.get(k) ?? 0, ms(e)));
    }
  }

  // Runs and attempts.
  const runs = new Map<string, { start: number; end: number; seqs: number[]; status?: string; turn: number }>();
  const attempts = new Map<
    string,
    { runId: string; start: number; seqs: number[]; end?: number; status?: string; turn: number; epoch: number; kind: string }
  >();
  // Steps, model calls, tool calls.
  const steps = new Map<string, { start: number; end?: number; last: number; seqs: number[]; step: number; turn: number; cost?: string }>();
  const calls: { call: EventRecord; result?: EventRecord }[] = [];
  const openCalls = new Map<string, { call: EventRecord; result?: EventRecord }>(); // `${turn}:${callId}`
  const failedAttempts: EventRecord[] = [];
  const modelStart = new Map<string, number>(); // step key → start of its earliest model call drawn

  for (const e of events) {
    const p = e.payload as Record<string, any>;
    // a compaction's copy of an earlier event is no new model call, result or step activity
    // (the compaction itself is a mark; `log` names the copy's original)
    if (p.copiedFrom !== undefined) continue;
    const t = ms(e);
    const mark = MARK_TYPES[e.type];
    if (mark) {
      const extra = e.type === 'session/attached' ? ` (writer epoch ${p.writerEpoch})` : '';
      marks.push({
        at: t,
        kind: mark.kind,
        label: mark.label,
        classes: [mark.kind, ...(mark.extra ? [mark.extra] : [])],
        seqs: [e.seq],
        title: `${e.type}${extra}: ${summarize(e)}`,
      });
    }
    const stepKey = `${e.turn}:${e.attempt}:${e.step}`;
    // A step of an attempt begins with its first event (a resumed attempt's begins at run/start).
    if (e.turn > 0 && e.step > 0) {
      const st = steps.get(stepKey) ?? { start: t, last: t, seqs: [], step: e.step, turn: e.turn };
      st.last = Math.max(st.last, t);
      st.seqs.push(e.seq);
      if (e.type === 'step/end') st.end = t;
      steps.set(stepKey, st);
    }
    switch (e.type) {
      case 'run/start': {
        const runId = String(p.runId);
        const run = runs.get(runId) ?? { start: t, end: t, seqs: [], turn: e.turn };
        run.seqs.push(e.seq);
        runs.set(runId, run);
        attempts.set(`${runId}:${p.attemptId}`, { runId, start: t, seqs: [e.seq], turn: e.turn, epoch: p.runEpoch, kind: p.kind });
        break;
      }
      case 'run/end': {
        const runId = String(p.runId);
        const run = runs.get(runId);
        if (run) {
          run.end = t;
          run.status = p.status;
          run.seqs.push(e.seq);
        }
        const a = attempts.get(`${runId}:${p.attemptId}`);
        if (a) {
          a.end = t;
          a.status = p.status;
          a.seqs.push(e.seq);
        }
        break;
      }
      case 'assistant/message': {
        const end = t;
        const start = end - Math.max(0, Number(p.latencyMs) || 0);
        const st = steps.get(stepKey);
        if (st) st.start = Math.min(st.start, start);
        // the step's cost: its model calls' priced usage (and failed attempts counted at their reservation)
        if (st && isDecimal(p.cost)) st.cost = addDecimal(st.cost ?? '0', p.cost);
        // (an answer whose usage never came back: at its reservation)
        if (st && p.counted === 'reservation' && isDecimal(p.reserved?.cost)) st.cost = addDecimal(st.cost ?? '0', p.reserved.cost);
        modelStart.set(stepKey, start);
        const nCalls = (p.message?.toolCalls ?? []).length;
        spans.push({
          row: 'model',
          start,
          end,
          label: nCalls ? `→ ${nCalls} call${nCalls > 1 ? 's' : ''}` : 'answer',
          classes: [`finish-${p.finishReason}`],
          seqs: [e.seq],
          title: summarize(e),
        });
        break;
      }
      case 'assistant/attempt': {
        failedAttempts.push(e);
        const st = steps.get(stepKey);
        if (st && p.counted === 'reservation' && isDecimal(p.reserved?.cost)) st.cost = addDecimal(st.cost ?? '0', p.reserved.cost);
        break;
      }
      case 'tool/call': {
        const entry = { call: e };
        calls.push(entry);
        openCalls.set(`${e.turn}:${p.callId}`, entry);
        break;
      }
      case 'tool/result': {
        const c = openCalls.get(`${e.turn}:${p.callId}`);
        openCalls.delete(`${e.turn}:${p.callId}`);
        if (c) c.result = e;
        break;
      }
      default: // the other events draw no span
        break;
    }
  }

  // Failed model attempts, laid out back to back before the step's successful call.
  for (const e of failedAttempts.sort((a, b) => Number(b.payload.attemptNumber) - Number(a.payload.attemptNumber))) {
    const p = e.payload as Record<string, any>;
    const key = `${e.turn}:${e.attempt}:${e.step}`;
    const end = modelStart.get(key) ?? ms(e);
    const start = end - Math.max(1, Number(p.latencyMs) || 0);
    modelStart.set(key, start);
    spans.push({ row: 'model', start, end, label: `failed #${p.attemptNumber}`, classes: ['failed'], seqs: [e.seq], title: summarize(e) });
  }

  for (const [runId, r] of runs) {
    let lastOfRun = r.end;
    for (const a of attempts.values())
      if (a.runId === runId) lastOfRun = Math.max(lastOfRun, attemptEnd.get(`${a.turn}:${a.epoch}`) ?? a.start);
    const settled = r.status !== undefined && !['suspended', 'detached', 'fenced'].includes(r.status);
    const status = r.status ?? 'interrupted';
    spans.push({
      row: 'run',
      start: r.start,
      end: settled ? r.end : lastOfRun,
      label: `${runId} · ${status}`,
      classes: [`status-${status}`, ...(settled ? [] : ['open'])],
      seqs: r.seqs,
      title: `run ${runId} (turn ${r.turn}): ${settled ? status : `not settled (last: ${status})`}`,
    });
  }
  for (const [key, a] of attempts) {
    const end = a.end ?? attemptEnd.get(`${a.turn}:${a.epoch}`) ?? a.start;
    const status = a.status ?? 'interrupted';
    spans.push({
      row: 'attempt',
      start: a.start,
      end,
      label: `${a.kind} #${a.epoch} · ${status}`,
      classes: [`status-${status}`, ...(a.status ? [] : ['interrupted'])],
      seqs: a.seqs,
      title:
        `attempt ${key.slice(a.runId.length + 1)} of run ${a.runId} (${a.kind}, run epoch ${a.epoch}): ` +
        `${a.status ?? 'interrupted — its process stopped before run/end'}`,
    });
  }
  for (const st of steps.values()) {
    spans.push({
      row: 'step',
      start: st.start,
      end: st.end ?? st.last,
      label: `step ${st.step}${st.cost !== undefined ? ` · ${st.cost}` : ''}`,
      classes: st.end === undefined ? ['open'] : [],
      seqs: st.seqs,
      title:
        `turn ${st.turn} step ${st.step}${st.cost !== undefined ? `, cost ${st.cost}` : ''}` +
        `${st.end === undefined ? ' (no step/end: interrupted or still running)' : ''}`,
    });
  }
  const toolSpans: Span[] = [];
  for (const { call, result } of calls) {
    const p = call.payload as Record<string, any>;
    const r = result?.payload as Record<string, any> | undefined;
    const outcome = r?.outcome as ToolOutcome | undefined;
    // A result written by a later attempt (recovery: rerun, reconcile) spans the restart.
    const recovered = result !== undefined && result.attempt !== call.attempt;
    const start = !recovered && typeof r?.startedAt === 'number' ? r.startedAt : ms(call);
    const end = result
      ? !recovered && typeof r?.endedAt === 'number'
        ? r.endedAt
        : ms(result)
      : Math.max(ms(call), attemptEnd.get(`${call.turn}:${call.attempt}`) ?? ms(call));
    toolSpans.push({
      row: 'tool',
      start,
      end: Math.max(start, end),
      label: `${p.name}${outcome ? '' : ' ?'}`,
      classes: [`mode-${p.mode}`, ...outcomeClasses(outcome), ...(recovered ? ['recovered'] : []), ...(p.resumable ? ['agent-call'] : [])],
      seqs: [call.seq, ...(result ? [result.seq] : [])],
      title:
        summarize(call) +
        (p.resumable ? ` (child session ${childSessionId({ sessionId, idempotencyKey: String(p.idempotencyKey) })})` : '') +
        (result
          ? ` → ${summarize(result)}${recovered ? ` (resolved by recovery, attempt ${result.attempt})` : ''}`
          : ' → no result: the process stopped while it ran'),
    });
  }
  const toolLanes = pack(toolSpans);
  spans.push(...toolSpans);

  let t0 = Infinity;
  let t1 = -Infinity;
  for (const t of [...spans.flatMap((s) => [s.start, s.end]), ...marks.map((m) => m.at)]) {
    if (!Number.isFinite(t)) continue;
    t0 = Math.min(t0, t);
    t1 = Math.max(t1, t);
  }
  if (t0 > t1) t0 = t1 = 0;
  return { sessionId, spans, marks, toolLanes, t0, t1 };
}
