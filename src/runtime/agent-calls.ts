import { randomUUID } from 'node:crypto';
import { STILL_OPEN, type ExecutionResult } from '../contracts/requests.js';
import type { PendingRequest } from '../contracts/events.js';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import type { JsonValue } from '../contracts/json.js';
import type { EventStore } from '../persistence/event-store.js';
import { sha256 } from '../persistence/surface.js';
import { unmarked, type AgentMark } from '../tools/agent-marks.js';
import { AgentInput } from '../tools/agent-tool.js';
import type { AnyTool, ToolContext, ToolReturn } from '../tools/define-tool.js';
import { callRuntimeOf } from '../tools/call-runtime.js';
import { contentText } from '../contracts/content.js';
import { isCancelledError } from '../contracts/errors.js';
import { followControl, routedAnswer, throughChild } from './child-requests.js';
import type { ExecutionSession } from './execution-session.js';
import type { ParentLink } from './session-agent.js';
import { currentRunResult } from './wait-for-result.js';
import { callActorOf, messageOf } from '../actors/tool-call.js';
import type { AnyActorRef } from 'xstate';
import { BudgetPool, childBudgetOf } from '../actors/budget-pool.js';
import type { ChildSpending } from '../actors/run-children.js';
import { addCounted, noneCounted, type Counted } from '../contracts/reservation.js';

/** The run a child session answers its parent call with (one per child session). */
export const CHILD_RUN = 'answer';

/** The longest child session id kept readable; a longer one is hashed (the store's id keys stay short). */
const MAX_CHILD_ID = 240;

/**
 * The child session of a parent call: `<parent session>/<run>/<step>/<call id>` (the call's
 * idempotency key, stable across recovery), or `<parent prefix>/~<sha-256>` when that would be
 * longer than 240 characters.
 */
export function childSessionId(ctx: Pick<ToolContext, 'sessionId' | 'idempotencyKey'>): string {
  const key = ctx.idempotencyKey.startsWith(`${ctx.sessionId}/`) ? ctx.idempotencyKey : `${ctx.sessionId}/${ctx.idempotencyKey}`;
  if (key.length <= MAX_CHILD_ID) return key;
  return `${ctx.sessionId.slice(0, 120)}/~${sha256(key)}`;
}

/** What the runtime gives an agentTool's calls: opening a child session, the store it reads, the pools children spend from. */
export interface ChildHost {
  store: EventStore;
  /** Opens (or shares) the child session; `agent` undefined: the one its log records. */
  open(sessionId: string, agent: string | undefined, parent: ParentLink, via: ChildVia): Promise<ExecutionSession>;
  /** By child session id: the pool of its parent's batch, while the parent's call runs it (its services read it). */
  pools: Map<string, BudgetPool>;
}

/** How a child session hangs from its parent's call. */
export interface ChildVia {
  /** The parent writer's hold, the child writer's guard (a child is fenced with its parent). */
  lost?: () => unknown;
  /** The tool-call actor the child's actors are inspected under (child-inspection.ts). */
  callActor?: AnyActorRef;
}

/**
 * `tool` with its calls running its agent in child sessions of `host`'s runtime. The child's
 * prompt is the `input` of agentTool's own parameters, or the call's arguments as JSON when the
 * tool has parameters of its own (given to agentTool, or to defineTool with the agentTool spread in).
 */
export function boundAgentTool(tool: AnyTool, mark: Extract<AgentMark, { kind: 'agent' }>, host: ChildHost): AnyTool {
  const promptOf = tool.parameters === AgentInput ? (args: unknown) => (args as AgentInput).input : (args: unknown) => JSON.stringify(args);
  return { ...unmarked(tool), execute: (args: unknown, ctx: ToolContext) => runChildCall(host, mark.agent.name, promptOf(args), ctx) };
}

/**
 * One agentTool call: opens its child session and takes the child's settled answer (a call run
 * again after a crash whose child had finished), answers the child's request with the answer its
 * parent's respond routed down, continues the child's interrupted run, or starts it — never twice:
 * its run id is fixed (`answer`), so a prompt for it is refused once it exists. The parent's
 * cancel (the call's signal) cancels the child, its stop and detach reach it too; a child that
 * waits for an answer (or was detached) leaves the call unsettled, and the parent waits with it.
 */
async function runChildCall(host: ChildHost, agent: string, prompt: string, ctx: ToolContext): Promise<ToolReturn> {
  const childId = childSessionId(ctx);
  const call = callRuntimeOf(ctx);
  const parent = {
    sessionId: ctx.sessionId,
    runId: ctx.runId,
    callId: ctx.callId,
    ...(ctx.callSeq !== undefined ? { seq: ctx.callSeq } : {}),
  };
  // the child's writer is guarded by its parent's: once the parent's writer no longer holds its
  // session (a lost lease, a takeover), the child starts no tool or model call and commits nothing
  const callActor = callActorOf(ctx);
  const via: ChildVia = { ...(call ? { lost: () => call.lost() } : {}), ...(callActor ? { callActor } : {}) };
  // the parent's writer, its fence read again before each effect on the child: a writer fenced
  // meanwhile (another process took the parent over, and resumes this call) neither opens nor runs it
  const holds = call ? () => call.holds() : async () => true;
  let child: ExecutionSession | undefined;
  const cancel = () => void child?.requestCancel('the parent run was cancelled');
  ctx.signal.addEventListener('abort', cancel, { once: true });
  // the child spends from its parent batch's pool: what the parent (and every ancestor) has left —
  // through a level of its own per try, so that a try that ends without the child's answer takes
  // back what it counted there (the next try counts what the child's log holds, once)
  const pool = childBudgetOf(ctx);
  let level: BudgetPool | undefined;
  // the child's last result (of any try): its spending goes with whatever the call answers
  let last: ExecutionResult | undefined;
  const spent = () => (last ? spendingOf(last, childId) : {});
  // a call cancelled before its child's run settled (waiting, detached, interrupted, or not started):
  // no result now — the run's end answers it once its cancel has reached that child (docs/agents.md, "Control")
  const cancelled = (): ToolReturn => {
    if (!call || !isCancelledError(ctx.signal.reason)) return cancelledOutcome(agent, spent(), ctx.signal.reason);
    call.leaveUnsettled();
    return `the ${agent} agent was cancelled before it answered`;
  };
  try {
    // Each try opens the child afresh, reading its log. A result its log does not hold (an append
    // failed or went unacknowledged: the run is still open there) or a failure to open or read it
    // is not the child's answer: the next try takes, or continues, what the log holds.
    let why = '';
    for (let tries = 1; tries <= CHILD_TRIES; tries++) {
      let unfollow = () => {};
      let answered = false;
      if (pool) host.pools.set(childId, (level = new BudgetPool(childId, {}, pool)));
      try {
        if (ctx.signal.aborted) return cancelled();
        if (!(await holds())) return { ...NOT_HELD, ...spent() };
        child = await host.open(childId, agent, parent, via);
        unfollow = call ? followControl(child, call, CHILD_RUN) : () => {};
        const state = await childState(host, child, childId, prompt, ctx, level, holds);
        answered = true; // whatever it answers now, what this try counted stands
        if (state === 'cancelled') return cancelled();
        if (state === 'not held') return { ...NOT_HELD, ...spent() };
        if ('result' in state && state.result) last = state.result;
        const open = 'waiting' in state || STILL_OPEN.has(state.result.status);
        // (a cancelled parent's run settles: the call cannot wait with it)
        if (ctx.signal.aborted) return open ? cancelled() : cancelledOutcome(agent, spent(), ctx.signal.reason);
        if (open && call) {
          // the child's run is still open: the parent's call stays without a result, its run waits
          // on the child's request (or is detached), and its next attempt runs this call again
          const request = 'waiting' in state ? state.waiting : state.result.pendingRequest;
          call.leaveUnsettled(request ? throughChild(childId, request) : undefined, last ? spentBy(last) : undefined);
          return `the ${agent} agent has not answered yet`;
        }
        if ('waiting' in state)
          return { kind: 'completed', content: `the ${agent} agent (session ${childId}) waits for an answer`, isError: true };
        if (state.result.checkpointCommitted) return outcomeOf(agent, childId, state.result, child);
        answered = false;
        why = state.result.error?.message ?? `its ${state.result.status} result was not recorded`;
      } catch (e) {
        if (ctx.signal.aborted) throw e;
        why = e instanceof Error ? e.message : String(e);
      } finally {
        unfollow();
        await child?.close();
        child = undefined;
        if (!answered) level?.retract();
      }
    }
    // what the child's log holds of its spending is counted by whoever continues its run
    return { kind: 'completed', content: `the ${agent} agent's run in session ${childId} is left open: ${why}`, isError: true, ...spent() };
  } finally {
    ctx.signal.removeEventListener('abort', cancel);
    if (level && host.pools.get(childId) === level) host.pools.delete(childId);
  }
}

/** Tries of a call whose child's result its log does not hold (or that could not open or read it). */
const CHILD_TRIES = 4;

const NOT_HELD: ToolOutcomeInput = {
  kind: 'completed',
  content: 'not run: this writer no longer holds the session (fenced, lease lost or closed)',
  isError: true,
};

/**
 * Where the child's run stands once this call has done what it can: waiting for an answer its
 * parent has not given yet, or the result of the child's run (taken as recorded, or of the
 * attempt this call ran: a respond with the answer the parent recorded, a continue, the prompt);
 * `cancelled` when the parent was cancelled first, `not held` when the parent's writer no longer
 * holds the parent (both checked after the last await before the child's run goes on).
 */
async function childState(
  host: ChildHost,
  child: ExecutionSession,
  childId: string,
  prompt: string,
  ctx: ToolContext,
  pool: BudgetPool | undefined,
  holds: () => Promise<boolean>,
): Promise<{ waiting: PendingRequest; result?: ExecutionResult } | { result: ExecutionResult } | 'cancelled' | 'not held'> {
  const asked = child.pendingRequest;
  if (asked) {
    // the child waits for an answer: the one its parent's respond recorded, if given yet
    const { questionId } = asked;
    const routed = await routedAnswer(
      host.store,
      { sessionId: ctx.sessionId, fromSeq: ctx.callSeq ?? 1 },
      { sessionId: childId, runId: CHILD_RUN, questionId },
    );
    // not yet: it goes on waiting, with what its run spent before it suspended (its recorded result)
    if (!routed) {
      const suspended = await currentRunResult(host.store, childId, CHILD_RUN);
      return { waiting: asked, ...(suspended ? { result: suspended } : {}) };
    }
    const held = await holds();
    if (ctx.signal.aborted) return 'cancelled';
    if (!held) return 'not held';
    const { attemptId, answer } = routed;
    return { result: await child.execute({ kind: 'respond', runId: CHILD_RUN, attemptId, questionId, answer }) };
  }
  const recorded = await currentRunResult(host.store, childId, CHILD_RUN);
  if (recorded) {
    // settled before: its answer, no model call; its spending counts for its siblings until the
    // parent commits it (a continue's or respond's child counts its own as its attempt starts)
    pool?.charge(spentBy(recorded));
    return { result: recorded };
  }
  const open = (await host.store.getHead(childId))?.openRun?.runId === CHILD_RUN;
  const held = await holds();
  // a cancel that came while the child was idle reached no run: checked here, after the last await
  if (ctx.signal.aborted) return 'cancelled';
  if (!held) return 'not held';
  if (open) return { result: await child.execute({ kind: 'continue', runId: CHILD_RUN, attemptId: `continue-${randomUUID()}` }) };
  return { result: await child.execute({ kind: 'prompt', runId: CHILD_RUN, attemptId: CHILD_RUN, message: prompt }) };
}

/** A call whose child's run was cancelled: with its parent run, or for the reason the call was aborted (its timeoutMs). */
const cancelledOutcome = (agent: string, spending: ChildSpending = {}, reason?: unknown): ToolOutcomeInput => ({
  kind: 'cancelled',
  settled: true,
  partialContent:
    reason === undefined || isCancelledError(reason)
      ? `the ${agent} agent was cancelled with its parent run`
      : `the ${agent} agent was cancelled: ${messageOf(reason)}`,
  resourceLocks: [],
  ...spending,
});

/**
 * What a child's run spent, as its call's result carries it to the parent (docs/agents.md,
 * "Budgets"): with its overruns, each naming the session that made the call (`childId`, or a
 * grandchild's that it carried up).
 */
export function spendingOf(r: ExecutionResult, childId: string): ChildSpending {
  const overruns = r.spending?.overruns ?? [];
  return {
    usage: r.usage,
    ...(r.cost !== undefined && r.cost !== '0' ? { cost: r.cost } : {}),
    ...(r.counted ? { counted: r.counted } : {}),
    ...(overruns.length > 0 ? { overruns: overruns.map((o) => ({ ...o, session: o.session ?? childId })) } : {}),
  };
}

/** A child's recorded spending, as a pool counts it: output tokens and cost, reported and counted at reservation. */
function spentBy(r: ExecutionResult): Counted {
  return addCounted({ outputTokens: r.usage.outputTokens, cost: r.cost ?? '0' }, r.counted ?? noneCounted());
}

/** The call's result from the child's: its answer (structured output as JSON), else what became of it; with the child's spending. */
function outcomeOf(agent: string, childId: string, r: ExecutionResult, child: ExecutionSession): ToolReturn {
  const uncertain = r.uncertainCalls.filter((c) => c.resolution === 'uncertain-hanging' || c.resolution === 'uncertain-settled');
  const note =
    uncertain.length > 0
      ? ` (calls of the ${agent} agent left uncertain by a crash: ${uncertain.map((c) => `${c.name} ${c.callId}`).join(', ')})`
      : '';
  if (r.status === 'cancelled') return cancelledOutcome(agent, spendingOf(r, childId));
  const spending = spendingOf(r, childId);
  if (r.status === 'succeeded') {
    const text = r.output !== undefined ? JSON.stringify(r.output) : (r.finalMessage ?? '');
    return {
      kind: 'completed',
      content: `${text}${note}`,
      isError: false,
      ...(r.output !== undefined ? { structured: r.output as JsonValue } : {}),
      ...spending,
    };
  }
  if (r.status === 'stopped') {
    // stopped after its round (its parent's stop reached it): what it had, its latest text
    const had = latestText(child);
    return {
      kind: 'completed',
      content: `the ${agent} agent (session ${childId}) stopped after its round${had ? `; what it had: ${had}` : ' with no answer'}${note}`,
      isError: false,
      ...spending,
    };
  }
  const budget = r.budget && (r.budgetOwner !== undefined ? `${r.budget} of session ${r.budgetOwner}` : r.budget);
  const why = r.error?.message ?? budget ?? r.pendingRequest?.questionId ?? '';
  return {
    kind: 'completed',
    content: `the ${agent} agent (session ${childId}) ended ${r.status}${why ? `: ${why}` : ''}${note}`,
    isError: true,
    ...spending,
  };
}

/** The text of the child's latest assistant message, if any. */
function latestText(child: ExecutionSession): string {
  const messages = child.snapshot().messages;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === 'assistant' && contentText(m.content).trim() !== '') return contentText(m.content);
  }
  return '';
}
