import { randomUUID } from 'node:crypto';
import type { ExecutionResult } from '../contracts/requests.js';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import type { JsonValue } from '../contracts/json.js';
import type { EventStore } from '../persistence/event-store.js';
import { sha256 } from '../persistence/surface.js';
import type { AgentMark } from '../tools/agent-marks.js';
import type { AnyTool, ToolContext, ToolReturn } from '../tools/define-tool.js';
import { callRuntimeOf } from '../tools/call-runtime.js';
import type { ExecutionSession } from './execution-session.js';
import type { ParentLink } from './session-agent.js';
import { currentRunResult } from './wait-for-result.js';

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

/** What the runtime gives an agentTool's calls: opening a child session, and the store it reads. */
export interface ChildHost {
  store: EventStore;
  /** `lost`: the parent writer's hold, the child writer's guard (a child is fenced with its parent). */
  open(sessionId: string, agent: string, parent: ParentLink, lost?: () => unknown): Promise<ExecutionSession>;
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
  const call = callRuntimeOf(ctx);
  const parent = {
    sessionId: ctx.sessionId,
    runId: ctx.runId,
    callId: ctx.callId,
    ...(ctx.callSeq !== undefined ? { seq: ctx.callSeq } : {}),
  };
  // the child's writer is guarded by its parent's: once the parent's writer no longer holds its
  // session (a lost lease, a takeover), the child starts no tool or model call and commits nothing
  const child = await host.open(childId, mark.agent.name, parent, call ? () => call.lost() : undefined);
  const cancel = () => void child.requestCancel('the parent run was cancelled');
  ctx.signal.addEventListener('abort', cancel, { once: true });
  try {
    if (ctx.signal.aborted) return cancelledOutcome(mark.agent.name);
    const result = await childResult(host, child, childId, mark, args);
    return outcomeOf(mark.agent.name, childId, result);
  } finally {
    ctx.signal.removeEventListener('abort', cancel);
    await child.close();
  }
}

async function childResult(
  host: ChildHost,
  child: ExecutionSession,
  childId: string,
  mark: Extract<AgentMark, { kind: 'agent' }>,
  args: unknown,
): Promise<ExecutionResult> {
  const recorded = await currentRunResult(host.store, childId, CHILD_RUN);
  if (recorded) return recorded; // settled (or suspended) before: its answer, no model call
  if (child.recovery.interruptedRuns.some((r) => r.runId === CHILD_RUN))
    return child.execute({ kind: 'continue', runId: CHILD_RUN, attemptId: `continue-${randomUUID()}` });
  const message = mark.ownParameters ? JSON.stringify(args) : (args as { input: string }).input;
  return child.execute({ kind: 'prompt', runId: CHILD_RUN, attemptId: CHILD_RUN, message });
}

const cancelledOutcome = (agent: string): ToolOutcomeInput => ({
  kind: 'cancelled',
  settled: true,
  partialContent: `the ${agent} agent was cancelled with its parent run`,
  resourceLocks: [],
});

/** The call's result from the child's: its answer (structured output as JSON), else what became of it; with the child's usage. */
function outcomeOf(agent: string, childId: string, r: ExecutionResult): ToolReturn {
  const uncertain = r.uncertainCalls.filter((c) => c.resolution === 'uncertain-hanging' || c.resolution === 'uncertain-settled');
  const note =
    uncertain.length > 0
      ? ` (calls of the ${agent} agent left uncertain by a crash: ${uncertain.map((c) => `${c.name} ${c.callId}`).join(', ')})`
      : '';
  if (r.status === 'cancelled') return cancelledOutcome(agent);
  const usage = r.usage;
  if (r.status === 'succeeded') {
    const text = r.output !== undefined ? JSON.stringify(r.output) : (r.finalMessage ?? '');
    return {
      kind: 'completed',
      content: `${text}${note}`,
      isError: false,
      ...(r.output !== undefined ? { structured: r.output as JsonValue } : {}),
      usage,
    };
  }
  const why = r.error?.message ?? r.budget ?? r.pendingRequest?.questionId ?? '';
  return {
    kind: 'completed',
    content: `the ${agent} agent (session ${childId}) ended ${r.status}${why ? `: ${why}` : ''}${note}`,
    isError: true,
    usage,
  };
}
