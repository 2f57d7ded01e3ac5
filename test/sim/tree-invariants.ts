/**
 * The tree family's invariants of the parent-child hand-over (tree-simulate.ts), checked on the
 * logs the tree reached by itself, and the tracker that classifies each crash by where it hit the
 * hand-over. For every agent call of the root:
 * - its child is started once: one child session, one `prompt` of its run; no tool of the child
 *   starts after the root committed the call's result;
 * - the root's recovery never reports it uncertain, and its result is never `uncertain-*`;
 * - its child's answer is committed in the root exactly once, and a completed result is the
 *   answer the child gave (naming the child's calls left uncertain by a crash);
 * - every run of its child settles, or the root's result reports that it did not (cancelled); an
 *   answer saying the child's run was cancelled with the root's (or had ended) finds it ended.
 * Exclusive side effects at every level are held by invariants.ts (never executed twice, an
 * interrupted one uncertain or reconciled in its own session). Must not import vitest.
 */
import type { EventRecord } from '../../src/contracts/events.js';
import type { SeedFacts } from './invariants.js';
import type { Ledgers } from './outside.js';
import { SUB_AGENTS } from './tree-outside.js';

type P = Record<string, unknown>;
const pl = (e: EventRecord) => e.payload as P;
const SETTLED_NOT = new Set(['suspended', 'detached', 'fenced']);
const isAgentCall = (name: unknown) => (SUB_AGENTS as readonly unknown[]).includes(name);

/** How often the seeds put the hand-over to the test. */
export interface TreeExercised {
  /** Crashes (and takeovers) that hit an agent call after its tool/call, before its child opened. */
  beforeChild: number;
  /** ... while its child ran. */
  childRunning: number;
  /** ... after its child settled, before the root committed the answer. */
  childDone: number;
  /** ... after the root committed the answer, its run still open. */
  afterCommit: number;
  /** Openings of the root that found an agent call without its result. */
  recoveredAgentCalls: number;
  /** Answers the root took from a child that settled in an earlier life of the root. */
  answersTakenFromLog: number;
  /** Child runs continued after their process stopped. */
  childrenContinued: number;
  /** Calls left uncertain in a child, named in the root's result. */
  childUncertainReported: number;
  /** Child runs left open (detached, interrupted) that a cancelled root's end cancelled. */
  childrenCancelledWithRoot: number;
  /** Exclusive side effects (ledger, stamp) that landed, at either level. */
  sideEffects: number;
}

interface CallState {
  key: string;
  state: 'intent' | 'child-running' | 'child-done' | 'committed';
}

/** Follows the durable records as they commit: where each agent call of the root stands. */
export class HandOver {
  private readonly calls = new Map<string, CallState>();
  private rootOpenRun = false;
  private order = 0;
  /** `${sessionId}#${seq}` → global commit order (across sessions). */
  readonly orderOf = new Map<string, number>();
  /** Every tool start, in the same order. */
  readonly toolStarts: { sessionId: string; callId: string; order: number }[] = [];
  private readonly counts = { beforeChild: 0, childRunning: 0, childDone: 0, afterCommit: 0 };
  constructor(private readonly root: string) {}

  private callOfChild(sid: string): CallState | undefined {
    const key = sid.includes('~') ? sid.slice(0, sid.lastIndexOf('~')) : sid;
    for (const c of this.calls.values()) if (c.key === key) return c;
    return undefined;
  }

  observe(r: EventRecord): void {
    this.orderOf.set(`${r.sessionId}#${r.seq}`, ++this.order);
    const p = pl(r);
    if (r.sessionId === this.root) {
      if (r.type === 'run/start') this.rootOpenRun = true;
      if (r.type === 'run/end' && !SETTLED_NOT.has(String(p.status))) this.rootOpenRun = false;
      if (r.type === 'tool/call' && isAgentCall(p.name))
        this.calls.set(String(p.callId), { key: String(p.idempotencyKey), state: 'intent' });
      if (r.type === 'tool/result') {
        const c = this.calls.get(String(p.callId));
        if (c) c.state = 'committed';
      }
      return;
    }
    const c = this.callOfChild(r.sessionId);
    if (!c || c.state === 'committed') return;
    if (r.type === 'run/start' || r.type === 'session/attached') c.state = 'child-running';
    if (r.type === 'run/end' && !SETTLED_NOT.has(String(p.status))) c.state = 'child-done';
  }

  toolStarted(sessionId: string, callId: string): void {
    this.toolStarts.push({ sessionId, callId, order: ++this.order });
  }

  /** A process stopped (crash) or was superseded (takeover): where the open agent calls stood. */
  crashed(): void {
    for (const c of this.calls.values()) {
      if (c.state === 'intent') this.counts.beforeChild++;
      else if (c.state === 'child-running') this.counts.childRunning++;
      else if (c.state === 'child-done') this.counts.childDone++;
      else if (this.rootOpenRun) this.counts.afterCommit++;
    }
    // a settled run's calls are history: only the open run's count from now on
    if (!this.rootOpenRun) this.calls.clear();
  }

  exercised(logs: Map<string, EventRecord[]>, ledgers: Ledgers): TreeExercised {
    const out: TreeExercised = {
      ...this.counts,
      recoveredAgentCalls: 0,
      answersTakenFromLog: 0,
      childrenContinued: 0,
      childUncertainReported: 0,
      childrenCancelledWithRoot: 0,
      sideEffects: ledgers.toolRuns.filter((r) => r.mode === 'exclusive' && r.effect).length,
    };
    const rootLog = logs.get(this.root) ?? [];
    const attaches = rootLog.filter((e) => e.type === 'session/attached');
    for (const call of rootLog.filter((e) => e.type === 'tool/call' && isAgentCall(pl(e).name))) {
      const callId = String(pl(call).callId);
      const result = rootLog.find((e) => e.type === 'tool/result' && pl(e).callId === callId);
      out.recoveredAgentCalls += attaches.filter((a) => a.seq > call.seq && (!result || result.seq > a.seq)).length;
      const child = [...logs.entries()].find(([sid]) => sid === String(pl(call).idempotencyKey))?.[1] ?? [];
      if (child.filter((e) => e.type === 'run/start').length > 1) out.childrenContinued++;
      if (child.some((e) => e.type === 'run/start' && String(pl(e).attemptId).startsWith('cancel-'))) out.childrenCancelledWithRoot++;
      const settledAt = child.find((e) => e.type === 'run/end' && !SETTLED_NOT.has(String(pl(e).status)));
      if (result && settledAt) {
        const childOrder = this.orderOf.get(`${settledAt.sessionId}#${settledAt.seq}`) ?? 0;
        const resultOrder = this.orderOf.get(`${this.root}#${result.seq}`) ?? 0;
        if (
          attaches.some((a) => {
            const o = this.orderOf.get(`${this.root}#${a.seq}`) ?? 0;
            return o > childOrder && o < resultOrder;
          })
        )
          out.answersTakenFromLog++;
      }
      const content = String((result && (pl(result).outcome as P).content) ?? '');
      if (content.includes('left uncertain by a crash')) out.childUncertainReported++;
    }
    return out;
  }
}

/** The hand-over's violations, one line each, and the child sessions left open with their parent's word for it. */
export function treeViolations(x: {
  root: string;
  logs: Map<string, EventRecord[]>;
  facts: SeedFacts;
  orderOf: Map<string, number>;
  toolStarts: readonly { sessionId: string; callId: string; order: number }[];
}): { violations: string[]; leftOpen: Set<string> } {
  const v: string[] = [];
  const leftOpen = new Set<string>();
  const { root, logs, facts, orderOf, toolStarts } = x;
  const rootLog = logs.get(root) ?? [];
  const calls = rootLog.filter((e) => e.type === 'tool/call' && isAgentCall(pl(e).name));
  const keys = new Map(calls.map((c) => [String(pl(c).idempotencyKey), String(pl(c).callId)]));
  // every child session belongs to an agent call of the root
  const childrenOf = new Map<string, string[]>();
  for (const sid of logs.keys()) {
    if (sid === root) continue;
    const key = sid.includes('~') ? sid.slice(0, sid.lastIndexOf('~')) : sid;
    const callId = keys.get(key);
    if (callId === undefined) v.push(`session ${sid} belongs to no agent call of the root`);
    else childrenOf.set(callId, [...(childrenOf.get(callId) ?? []), sid]);
  }
  const rootSettled = new Set(
    rootLog.filter((e) => e.type === 'run/end' && !SETTLED_NOT.has(String(pl(e).status))).map((e) => String(pl(e).runId)),
  );
  for (const call of calls) {
    const p = pl(call);
    const callId = String(p.callId);
    const what = `${root}: agent call ${String(p.name)} ${callId}`;
    const sessions = childrenOf.get(callId) ?? [];
    if (sessions.length > 1) v.push(`${what} ran its child in ${sessions.length} sessions (${sessions.join(', ')}): started again`);
    const childLogs = sessions.map((s) => logs.get(s)!);
    const prompts = childLogs.flat().filter((e) => e.type === 'run/start' && pl(e).kind === 'prompt').length;
    if (prompts > 1) v.push(`${what}: its child was started ${prompts} times`);

    // never uncertain, in the result or in any recovery of the root
    const results = rootLog.filter((e) => e.type === 'tool/result' && pl(e).callId === callId);
    const outcome = results[0] ? (pl(results[0]).outcome as { kind: string; content?: string; isError?: boolean }) : undefined;
    if (outcome?.kind.startsWith('uncertain')) v.push(`${what} resolved as ${outcome.kind}`);
    for (const rec of facts.recoveries)
      if (rec.recovery.sessionId === root && rec.recovery.uncertainToolCalls.some((u) => u.callId === callId))
        v.push(`${what} named uncertain by the recovery of ${rec.instance}`);

    // the answer committed exactly once, the one the child gave
    if (results.length > 1) v.push(`${what}: the child's answer committed ${results.length} times`);
    if (results.length === 0 && rootSettled.has(String(p.idempotencyKey).split('/')[1] ?? ''))
      v.push(`${what}: its run settled without the child's answer`);
    const childEnds = childLogs.flat().filter((e) => e.type === 'run/end' && !SETTLED_NOT.has(String(pl(e).status)));
    // a child stopped after its round (its parent's stop reached it) answers with what it had
    const answer = childEnds.find((e) => pl(e).status === 'succeeded' || pl(e).status === 'stopped');
    const stopped = answer !== undefined && pl(answer).status === 'stopped';
    const result = answer
      ? (pl(answer).result as { finalMessage?: string; uncertainCalls?: { callId: string; name: string; resolution: string }[] })
      : undefined;
    if (outcome?.kind === 'completed' && !outcome.isError) {
      if (!result) v.push(`${what}: the root took an answer its child never gave (${JSON.stringify(outcome.content ?? '').slice(0, 80)})`);
      else if (
        stopped
          ? !String(outcome.content ?? '').includes(`(session ${answer.sessionId}) stopped after its round`)
          : !String(outcome.content ?? '').startsWith(result.finalMessage ?? '\u0000')
      )
        v.push(
          `${what}: the root's result ${JSON.stringify(outcome.content)} is not the child's answer ${JSON.stringify(result.finalMessage)}`,
        );
      for (const u of result?.uncertainCalls ?? [])
        if (u.resolution.startsWith('uncertain') && !String(outcome.content).includes(`${u.name} ${u.callId}`))
          v.push(`${what}: the child's call ${u.name} ${u.callId} left ${u.resolution} is not named in the root's result`);
    }
    if (childEnds.length > 1) v.push(`${what}: its child's run settled ${childEnds.length} times`);

    // every child run settles, or the root's result says it did not wait for it
    for (const log of childLogs) {
      const open = log.filter(
        (e) => e.type === 'run/start' && !childEnds.some((end) => pl(end).runId === pl(e).runId && end.sessionId === e.sessionId),
      );
      const reported =
        outcome?.kind === 'cancelled' ||
        outcome?.kind === 'skipped' ||
        (outcome?.isError === true && String(outcome.content).includes(`run in session ${open[0]?.sessionId} is left open`));
      // an answer given at a cancelled run's end, once its cancel reached the child, says the child's run ended
      const saidEnded = / child session \S+ (was cancelled with it|had ended \w+|never started its run)/.exec(
        String((outcome as { partialContent?: string } | undefined)?.partialContent ?? ''),
      );
      if (open.length > 0 && saidEnded)
        v.push(`${what}: the root's answer says "${saidEnded[1]}" but run ${String(pl(open[0]!).runId)} of ${open[0]!.sessionId} is open`);
      if (open.length > 0 && reported) leftOpen.add(open[0]!.sessionId);
      if (open.length > 0 && !reported)
        v.push(
          `${what}: child run ${String(pl(open[0]!).runId)} of ${open[0]!.sessionId} never settled (the root's result: ${outcome?.kind ?? 'none'})`,
        );
    }
    // no tool of the child starts once the root committed the call's result (an append already
    // sent when the parent's process paused may still land; a tool start is guarded by the parent's
    // writer), unless that result left the child cancelling (cancelled, unsettled)
    const unsettledCancel = outcome?.kind === 'cancelled' && (outcome as { settled?: boolean }).settled === false;
    if (results[0] && !unsettledCancel) {
      const committedAt = orderOf.get(`${root}#${results[0].seq}`) ?? Infinity;
      for (const t of toolStarts)
        if (sessions.includes(t.sessionId) && t.order > committedAt)
          v.push(`${what}: its child's call ${t.callId} in ${t.sessionId} started after the root committed the call's result`);
    }
  }
  return { violations: v, leftOpen };
}
