/**
 * The invariants checked after every seed (issue 20 item 2), from the durable log and the outside
 * world's own ledgers. Each returns the violations it found, one line each, naming what broke.
 */
import { addDecimal, decimalAtLeast } from '../../src/contracts/budget.js';
import { tokenPrice } from '../crash/budget-pricing.js';
import type { EventRecord } from '../../src/contracts/events.js';
import type { RecoveryOutcome } from '../../src/contracts/requests.js';
import type { AckLedger } from './faulty-store.js';
import type { Ledgers } from './outside.js';

export interface SeedFacts {
  budget: { maxSteps: number; maxToolCalls?: number; maxOutputTokens?: number; maxCost?: string };
  idempotentOwner: boolean;
  /** `${sessionId}\0${inputId}` of every input whose receipt was returned. */
  receipts: Set<string>;
  /** What each opening of a session reported, by the instance it made. */
  recoveries: { proc: number; instance: string; recovery: RecoveryOutcome }[];
  untyped?: string;
}

const SETTLED_NOT = new Set(['suspended', 'detached', 'fenced']);
type P = Record<string, unknown>;
const pl = (e: EventRecord) => e.payload as P;

export function checkInvariants(x: {
  logs: Map<string, EventRecord[]>;
  acks: AckLedger;
  ledgers: Ledgers;
  facts: SeedFacts;
  /**
   * Sessions whose open run was left open on purpose, and said so (a child session whose parent
   * call was cancelled, or reported the child's run left open: tree-invariants.ts): their run need
   * not settle, nor its calls be answered, nor its final get a delivery outcome.
   */
  leftOpen?: ReadonlySet<string>;
}): string[] {
  const v: string[] = [];
  const { logs, acks, ledgers, facts } = x;
  const leftOpen = x.leftOpen ?? new Set<string>();
  if (facts.untyped) v.push(facts.untyped);
  for (const p of ledgers.problems) v.push(p);

  // contiguous seqs, unique ids, no event from a fenced writer (epochs never go back along the log)
  for (const [sid, log] of logs) {
    const ids = new Set<string>();
    let epoch = 0;
    log.forEach((e, i) => {
      if (e.seq !== i + 1) v.push(`${sid}: seq ${e.seq} at position ${i + 1} (not contiguous)`);
      if (ids.has(e.eventId)) v.push(`${sid}: event id ${e.eventId} twice`);
      ids.add(e.eventId);
      if (e.writerEpoch < epoch)
        v.push(`${sid}#${e.seq}: ${e.type} written by fenced writer epoch ${e.writerEpoch} after epoch ${epoch} attached`);
      epoch = Math.max(epoch, e.writerEpoch);
    });
  }

  // every acknowledged event present, as acknowledged
  for (const r of acks.acked.values()) {
    const got = logs.get(r.sessionId)?.[r.seq - 1];
    if (!got || got.eventId !== r.eventId || got.type !== r.type)
      v.push(
        `${r.sessionId}#${r.seq}: acknowledged ${r.type} ${r.eventId} is not in the log (found ${got ? `${got.type} ${got.eventId}` : 'nothing'})`,
      );
  }

  // exclusive calls: never executed twice
  const starts = new Map<string, number>();
  for (const r of ledgers.toolRuns) if (r.mode === 'exclusive') starts.set(r.key, (starts.get(r.key) ?? 0) + 1);
  for (const [key, n] of starts) if (n > 1) v.push(`exclusive call ${key} executed ${n} times`);

  for (const [sid, all] of logs) {
    // a compaction copies the events after its summary into the new epoch (payload.copiedFrom): the same facts, not new ones
    const log = all.filter((e) => pl(e).copiedFrom === undefined);
    const calls = log.filter((e) => e.type === 'tool/call');
    const results = new Map<string, EventRecord[]>();
    for (const e of log) if (e.type === 'tool/result') results.set(String(pl(e).callId), [...(results.get(String(pl(e).callId)) ?? []), e]);
    const rejected = new Set<string>();
    for (const e of log) if (e.type === 'tool/batch-rejected') for (const i of pl(e).issues as { callId: string }[]) rejected.add(i.callId);
    for (const [callId, rs] of results) if (rs.length > 1) v.push(`${sid}: call ${callId} has ${rs.length} results`);
    // every interrupted exclusive call surfaced as uncertain or reconciled, by name
    for (const c of calls) {
      const p = pl(c);
      const r = results.get(String(p.callId))?.[0];
      if (!r) continue; // checked below (every call answered)
      const o = pl(r).outcome as { kind: string; content?: string; isError?: boolean };
      if (pl(r).name !== p.name) v.push(`${sid}: result of ${p.callId} names ${String(pl(r).name)}, its call ${String(p.name)}`);
      const key = String(p.idempotencyKey);
      const effect = ledgers.effectOf(key);
      if (o.kind === 'completed' && o.content?.startsWith('done:') && !effect)
        v.push(`${sid}: ${p.name} ${p.callId} recorded completed, but the tool never completed it`);
      // a resumable call (an agentTool's) is run again to resume its child: tree-invariants.ts holds it
      if (p.mode !== 'exclusive' || p.resumable === true) continue;
      if (r.attempt !== c.attempt && !(o.kind.startsWith('uncertain') || o.content?.startsWith('reconciled'))) {
        v.push(
          `${sid}: interrupted exclusive ${p.name} ${p.callId} resolved as ${o.kind} ${JSON.stringify(o.content ?? '')} in a later attempt (neither uncertain nor reconciled)`,
        );
      }
      if (o.content?.startsWith('reconciled:') && !effect) v.push(`${sid}: ${p.callId} reconciled as done, but it never ran`);
    }
    // an exclusive call left without a result when a session was opened is named by that opening's recovery
    for (const a of log.filter((e) => e.type === 'session/attached')) {
      const rec = facts.recoveries.find((r) => r.instance === pl(a).sessionInstanceId && r.recovery.sessionId === sid)?.recovery;
      if (!rec) continue; // that opening did not finish (its process died)
      for (const c of calls) {
        const p = pl(c);
        if (p.mode !== 'exclusive' || p.resumable === true || c.seq > a.seq) continue;
        const r = results.get(String(p.callId))?.[0];
        if (r && r.seq < a.seq) continue;
        const named = rec.uncertainToolCalls.find((u) => u.callId === p.callId);
        if (!named || named.name !== p.name)
          v.push(`${sid}: interrupted exclusive ${p.name} ${p.callId} not named in the recovery of the opening at #${a.seq}`);
        else if (named.resolution !== 'reconcile' && named.resolution !== 'uncertain-hanging')
          v.push(`${sid}: interrupted exclusive ${p.callId} reported as ${named.resolution}`);
      }
    }
    // the conversation is valid: every tool call of an assistant message answered
    for (const e of leftOpen.has(sid) ? [] : log) {
      if (e.type !== 'assistant/message') continue;
      for (const tc of (pl(e).message as { toolCalls?: { id: string; name: string }[] }).toolCalls ?? []) {
        if (!results.has(tc.id) && !rejected.has(tc.id))
          v.push(`${sid}: call ${tc.id} (${tc.name}) of ${e.turn}.${e.step} is never answered`);
      }
    }

    // every final delivered at most once (unless the owner is idempotent), and committed or unknown;
    // a child session's (an agent call's) is its call's result, never the owner's
    const child = log[0]?.type === 'session/attached' && pl(log[0]).parent !== undefined;
    for (const f of log.filter((e) => e.type === 'final/message')) {
      const fid = String(pl(f).finalMessageId);
      const marks = log.filter((e) => (e.type === 'delivery/committed' || e.type === 'delivery/unknown') && pl(e).finalMessageId === fid);
      const delivered = ledgers.deliveries.filter((d) => d.sessionId === sid && d.finalMessageId === fid).length;
      if (marks.length > 1 || (marks.length === 0 && !leftOpen.has(sid)))
        v.push(`${sid}: final ${fid} has ${marks.length} delivery outcomes (${marks.map((m) => m.type).join(', ') || 'none'})`);
      if (delivered > 1 && !facts.idempotentOwner) v.push(`${sid}: final ${fid} delivered ${delivered} times to a non-idempotent owner`);
      if (child && delivered > 0) v.push(`${sid}: the child's final ${fid} was given to the app's delivery owner`);
      const byResult = child && marks[0] !== undefined && pl(marks[0]).owner === 'result';
      if (marks[0]?.type === 'delivery/committed' && delivered === 0 && !byResult)
        v.push(`${sid}: final ${fid} marked delivered, never delivered`);
    }
    const fids = new Set(log.filter((e) => e.type === 'final/message').map((e) => String(pl(e).finalMessageId)));
    for (const d of ledgers.deliveries)
      if (d.sessionId === sid && !fids.has(d.finalMessageId)) v.push(`${sid}: final ${d.finalMessageId} delivered but never committed`);

    // every run settles (the fault-free recovery resumed whatever was open)
    const settles = new Map<string, number>();
    const attemptEnds = new Map<string, number>();
    for (const e of log) {
      if (e.type === 'run/start') settles.set(String(pl(e).runId), settles.get(String(pl(e).runId)) ?? 0);
      if (e.type !== 'run/end') continue;
      const k = `${pl(e).runId}/${pl(e).attemptId}`;
      attemptEnds.set(k, (attemptEnds.get(k) ?? 0) + 1);
      if (!SETTLED_NOT.has(String(pl(e).status))) settles.set(String(pl(e).runId), (settles.get(String(pl(e).runId)) ?? 0) + 1);
    }
    for (const [runId, n] of settles)
      if (n > 1 || (n === 0 && !leftOpen.has(sid)))
        v.push(`${sid}: run ${runId} settled ${n} times (open after the fault-free recovery, or settled twice)`);
    for (const [k, n] of attemptEnds) if (n > 1) v.push(`${sid}: attempt ${k} wrote ${n} run/end`);

    // budgets: a run never goes on past the step after which a budget was spent
    const byTurn = new Map<number, EventRecord[]>();
    for (const e of log) if (e.turn > 0) byTurn.set(e.turn, [...(byTurn.get(e.turn) ?? []), e]);
    for (const [turn, evs] of byTurn) {
      let steps = 0;
      let calls = 0;
      let out = 0;
      const spentAt: string[] = [];
      for (const e of evs) {
        if (e.type === 'step/start') {
          if (spentAt.length > 0) v.push(`${sid}: turn ${turn} started step ${e.step} after ${spentAt[0]} was spent`);
        }
        if (e.type === 'tool/call') calls++;
        if (e.type === 'assistant/message' || e.type === 'compaction')
          out += (pl(e).usage as { outputTokens?: number } | undefined)?.outputTokens ?? 0;
        if (e.type === 'step/end') {
          steps++;
          if (steps >= facts.budget.maxSteps) spentAt.push(`maxSteps (${steps})`);
          if (facts.budget.maxToolCalls !== undefined && calls >= facts.budget.maxToolCalls) spentAt.push(`maxToolCalls (${calls})`);
          if (facts.budget.maxOutputTokens !== undefined && out >= facts.budget.maxOutputTokens) spentAt.push(`maxOutputTokens (${out})`);
        }
      }
    }

    v.push(...reservationViolations(sid, log, facts.budget));
    for (const e of afterStandingCancel(log).broken)
      v.push(`${sid}#${e.seq}: ${e.type} by attempt ${e.attempt} of a run whose cancel was recorded`);

    // every accepted input consumed exactly once (or cancelled before it was), once the system is at
    // rest: a follow-up by the run it starts; a steer by the run it joins (its user/message) or, when
    // no run takes it, by a run of its own (its run/start)
    const accepted = log.filter((e) => e.type === 'input/accepted');
    for (const a of accepted) {
      const inputId = String(pl(a).inputId);
      const cancelled = log.some((e) => e.type === 'input/cancelled' && pl(e).inputId === inputId);
      const ownRuns = log.filter((e) => e.type === 'run/start' && pl(e).inputId === inputId);
      const ownTurns = new Set(ownRuns.map((e) => e.turn));
      const joined =
        pl(a).mode === 'steer'
          ? log.filter((e) => e.type === 'user/message' && pl(e).inputId === inputId && !ownTurns.has(e.turn)).length
          : 0;
      const used = ownRuns.length + joined;
      if (used + (cancelled ? 1 : 0) !== 1)
        v.push(`${sid}: ${String(pl(a).mode)} input ${inputId} consumed ${used} times${cancelled ? ' and cancelled' : ''}`);
    }
    if (accepted.length !== new Set(accepted.map((a) => pl(a).inputId)).size) v.push(`${sid}: an input accepted twice`);
    for (const k of facts.receipts) {
      const [s, inputId] = k.split('\u0000');
      if (s === sid && !accepted.some((a) => pl(a).inputId === inputId))
        v.push(`${sid}: input ${inputId} has a receipt but no input/accepted`);
    }
  }
  return v;
}

/**
 * No model call starts whose worst case could cross the budget (docs/guarantees.md, "Budgets"):
 * each call recorded with its reservation (`assistant/message`, `assistant/attempt`) reserved no
 * more than what the run's earlier usage (priced with tokenPrice) and earlier reservations counted
 * (failed attempts, a crashed attempt's call recorded in the next `run/start`) left of `maxCost` and
 * `maxOutputTokens`, in log order.
 */
type Reserved = { inputTokens: number; outputTokens: number; cost?: string };

function reservationViolations(sid: string, log: readonly EventRecord[], budget: SeedFacts['budget']): string[] {
  if (budget.maxCost === undefined && budget.maxOutputTokens === undefined) return [];
  const v: string[] = [];
  const runs = new Map<string, { cost: string; out: number }>();
  let run: { cost: string; out: number } | undefined;
  for (const e of log) {
    const p = pl(e);
    if (p.copiedFrom !== undefined) continue;
    if (e.type === 'run/start') {
      run = runs.get(p.runId as string) ?? { cost: '0', out: 0 };
      runs.set(p.runId as string, run);
    }
    if (!run) continue;
    const r = p.reserved as Reserved | undefined;
    if (r && (e.type === 'assistant/message' || e.type === 'assistant/attempt')) {
      const worst = addDecimal(run.cost, r.cost ?? tokenPrice(r));
      if (budget.maxCost !== undefined && !decimalAtLeast(budget.maxCost, worst))
        v.push(`${sid}#${e.seq}: a model call started whose worst case (${worst} with what was spent) crosses maxCost ${budget.maxCost}`);
      if (budget.maxOutputTokens !== undefined && run.out + r.outputTokens > budget.maxOutputTokens)
        v.push(
          `${sid}#${e.seq}: a model call started with ${r.outputTokens} output tokens reserved after ${run.out}, crossing maxOutputTokens`,
        );
    }
    const counted = (c: Reserved) => {
      run!.cost = addDecimal(run!.cost, c.cost ?? tokenPrice(c));
      run!.out += c.outputTokens;
    };
    if (e.type === 'run/start' && p.recoveredReservation) counted(p.recoveredReservation as Reserved);
    if (e.type === 'assistant/attempt' && p.counted === 'reservation' && r) counted(r);
    if ((e.type === 'assistant/message' || e.type === 'compaction') && p.usage) {
      const u = p.usage as Reserved;
      counted({ inputTokens: u.inputTokens, outputTokens: u.outputTokens });
    }
  }
  return v;
}

/**
 * A recorded cancel stands (docs/guarantees.md, "Recovery"): an attempt of a run that started after
 * the run's `cancellation/requested` (no `run/end` between) calls no model, announces no tool call
 * and runs no parallel call again (it is answered `skipped`). Returns the events that broke it, and
 * how many attempts started so (to show it is exercised).
 */
export function afterStandingCancel(log: readonly EventRecord[]): { attempts: number; broken: EventRecord[] } {
  const broken: EventRecord[] = [];
  let attempts = 0;
  let run: string | undefined;
  let cancelledBy: number | undefined; // the attempt the standing cancel was recorded for
  let cancelledFor: unknown; // and its `${runId}/${attemptId}`, as the record names it
  const standing = new Set<number>(); // run epochs of the later attempts, which start with it recorded
  const modes = new Map<string, unknown>();
  for (const e of log) {
    const p = pl(e);
    if (e.type === 'run/start') {
      // a new run: a cancel still standing (a run/end clears it) landed ahead of its first run/start —
      // its own if it names that attempt, else it stands for nothing
      if (p.runId !== run) {
        run = String(p.runId);
        standing.clear();
        if (cancelledFor !== `${String(p.runId)}/${String(p.attemptId)}`) cancelledBy = undefined;
      }
      if (cancelledBy === undefined) standing.clear();
      else if (Number(p.runEpoch) > cancelledBy && !standing.has(Number(p.runEpoch))) {
        standing.add(Number(p.runEpoch));
        attempts++;
      }
      continue;
    }
    if (e.type === 'cancellation/requested' && cancelledBy === undefined) {
      cancelledBy = e.attempt;
      cancelledFor = `${String(p.runId)}/${String(p.attemptId)}`;
    }
    if (e.type === 'run/end') cancelledBy = undefined;
    if (e.type === 'tool/call') modes.set(String(p.callId), p.mode);
    if (!standing.has(e.attempt)) continue;
    const rerun =
      e.type === 'tool/result' && modes.get(String(p.callId)) === 'parallel' && (p.outcome as { kind: string }).kind === 'completed';
    if (e.type === 'assistant/message' || e.type === 'tool/call' || rerun) broken.push(e);
  }
  return { attempts, broken };
}
