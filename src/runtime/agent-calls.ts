import { randomUUID } from 'node:crypto';
import type { ExecutionResult } from '../contracts/requests.js';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import type { JsonValue } from '../contracts/json.js';
import type { EventStore } from '../persistence/event-store.js';
import { sha256 } from '../persistence/surface.js';
import type { AgentMark } from '../tools/agent-marks.js';
import type { AnyTool, ToolContext, ToolReturn } from '../tools/define-tool.js';
import { callActorOf } from '../actors/tool-call.js';
import type { AnyActorRef } from 'xstate';
import type { ExecutionSession } from './execution-session.js';
import type { ParentLink } from './session-agent.js';
import { currentRunResult } from './wait-for-result.js';
import { childBudgetOf, type BudgetPool } from '../actors/budget-pool.js';
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
  /** `callActor`: the tool-call actor the child's actors are inspected under (child-inspection.ts). */
  open(sessionId: string, agent: string, parent: ParentLink, callActor?: AnyActorRef): Promise<ExecutionSession>;
  /** By child session id: the pool of its parent's batch, while the parent's call runs it (its services read it). */
  pools: Map<string, BudgetPool>;
}

/** `tool` with its calls running its agent in child sessions of `host`'s runtime. */
export function boundAgentTool(tool: AnyTool, mark: Extract<AgentMark, { kind: 'agent' }>, host: ChildHost): AnyTool {
  return { ...tool, execute: (args: unknown, ctx: ToolContext) => runChildCall(host, mark, args, ctx) };
}

/**
 * One agentTool call: opens its child session and takes the child's settled answer (a call run
 * again after a crash whose child had finished), continues the child's interrupted run, or starts
 * it — never twice: its run id is fixed (`answer`), so a prompt for it is refused once it exists.
 * The parent's cancel (the call's signal) cancels the child.
 */
async function runChildCall(
  host: ChildHost,
  mark: Extract<AgentMark, { kind: 'agent' }>,
  args: unknown,
  ctx: ToolContext,
): Promise<ToolReturn> {
  const childId = childSessionId(ctx);
  const child = await host.open(
    childId,
    mark.agent.name,
    {
      sessionId: ctx.sessionId,
      runId: ctx.runId,
      callId: ctx.callId,
      ...(ctx.callSeq !== undefined ? { seq: ctx.callSeq } : {}),
    },
    callActorOf(ctx),
  );
  const cancel = () => void child.requestCancel('the parent run was cancelled');
  ctx.signal.addEventListener('abort', cancel, { once: true });
  // the child spends from its parent batch's pool: what the parent (and every ancestor) has left
  const pool = childBudgetOf(ctx);
  if (pool) host.pools.set(childId, pool);
  try {
    if (ctx.signal.aborted) return cancelledOutcome(mark.agent.name);
    const result = await childResult(host, child, childId, mark, args, pool);
    return outcomeOf(mark.agent.name, childId, result);
  } finally {
    ctx.signal.removeEventListener('abort', cancel);
    if (pool && host.pools.get(childId) === pool) host.pools.delete(childId);
    await child.close();
  }
}

async function childResult(
  host: ChildHost,
  child: ExecutionSession,
  childId: string,
  mark: Extract<AgentMark, { kind: 'agent' }>,
  args: unknown,
  pool: BudgetPool | undefined,
): Promise<ExecutionResult> {
  const recorded = await currentRunResult(host.store, childId, CHILD_RUN);
  if (recorded) {
    // settled (or suspended) before: its answer, no model call; its spending counts for its siblings
    // until the parent commits it (a continue's child counts its own as its attempt starts)
    pool?.charge(spentBy(recorded));
    return recorded;
  }
  if (child.recovery.interruptedRuns.some((r) => r.runId === CHILD_RUN))
    return child.execute({ kind: 'continue', runId: CHILD_RUN, attemptId: `continue-${randomUUID()}` });
  const message = mark.ownParameters ? JSON.stringify(args) : (args as { input: string }).input;
  return child.execute({ kind: 'prompt', runId: CHILD_RUN, attemptId: CHILD_RUN, message });
}

const cancelledOutcome = (agent: string, spending: ChildSpending = {}): ToolOutcomeInput => ({
  kind: 'cancelled',
  settled: true,
  partialContent: `the ${agent} agent was cancelled with its parent run`,
  resourceLocks: [],
  ...spending,
});

type ChildSpending = Pick<Extract<ToolOutcomeInput, { kind: 'completed' }>, 'usage' | 'cost' | 'counted'>;

/** What a child's run spent, as its call's result carries it to the parent (docs/agents.md, "Budgets"). */
function spendingOf(r: ExecutionResult): ChildSpending {
  return {
    usage: r.usage,
    ...(r.cost !== undefined && r.cost !== '0' ? { cost: r.cost } : {}),
    ...(r.counted ? { counted: r.counted } : {}),
  };
}

/** A child's recorded spending, as a pool counts it: output tokens and cost, reported and counted at reservation. */
function spentBy(r: ExecutionResult): Counted {
  return addCounted({ outputTokens: r.usage.outputTokens, cost: r.cost ?? '0' }, r.counted ?? noneCounted());
}

/** The call's result from the child's: its answer (structured output as JSON), else what became of it; with the child's spending. */
function outcomeOf(agent: string, childId: string, r: ExecutionResult): ToolReturn {
  const uncertain = r.uncertainCalls.filter((c) => c.resolution === 'uncertain-hanging' || c.resolution === 'uncertain-settled');
  const note =
    uncertain.length > 0
      ? ` (calls of the ${agent} agent left uncertain by a crash: ${uncertain.map((c) => `${c.name} ${c.callId}`).join(', ')})`
      : '';
  if (r.status === 'cancelled') return cancelledOutcome(agent, spendingOf(r));
  const spending = spendingOf(r);
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
  const budget = r.budget && (r.budgetOwner !== undefined ? `${r.budget} of session ${r.budgetOwner}` : r.budget);
  const why = r.error?.message ?? budget ?? r.pendingRequest?.questionId ?? '';
  return {
    kind: 'completed',
    content: `the ${agent} agent (session ${childId}) ended ${r.status}${why ? `: ${why}` : ''}${note}`,
    isError: true,
    ...spending,
  };
}
