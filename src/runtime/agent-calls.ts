import { randomUUID } from 'node:crypto';
import type { ExecutionResult } from '../contracts/requests.js';
import type { PendingRequest } from '../contracts/events.js';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import type { JsonValue } from '../contracts/json.js';
import type { EventStore } from '../persistence/event-store.js';
import { sha256 } from '../persistence/surface.js';
import type { AgentMark } from '../tools/agent-marks.js';
import type { AnyTool, ToolContext, ToolReturn } from '../tools/define-tool.js';
import { callRuntimeOf } from '../tools/call-runtime.js';
import { contentText } from '../contracts/content.js';
import { followControl, routedAnswer, throughChild } from './child-requests.js';
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
 * again after a crash whose child had finished), answers the child's request with the answer its
 * parent's respond routed down, continues the child's interrupted run, or starts it — never twice:
 * its run id is fixed (`answer`), so a prompt for it is refused once it exists. The parent's
 * cancel (the call's signal) cancels the child, its stop and detach reach it too; a child that
 * waits for an answer (or was detached) leaves the call unsettled, and the parent waits with it.
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
  const unfollow = call ? followControl(child, call, CHILD_RUN) : () => {};
  try {
    if (ctx.signal.aborted) return cancelledOutcome(mark.agent.name);
    const state = await childState(host, child, childId, mark, args, ctx);
    // (a cancelled parent answers the call `cancelled`: its run settles, the call cannot wait with it)
    if (ctx.signal.aborted) return cancelledOutcome(mark.agent.name);
    const open = 'waiting' in state || OPEN.has(state.result.status);
    if (open && call) {
      // the child's run is still open: the parent's call stays without a result, its run waits
      // on the child's request (or is detached), and its next attempt runs this call again
      const request = 'waiting' in state ? state.waiting : state.result.pendingRequest;
      call.leaveUnsettled(request ? throughChild(childId, request) : undefined);
      return `the ${mark.agent.name} agent has not answered yet`;
    }
    if ('waiting' in state)
      return { kind: 'completed', content: `the ${mark.agent.name} agent (session ${childId}) waits for an answer`, isError: true };
    return outcomeOf(mark.agent.name, childId, state.result, child);
  } finally {
    unfollow();
    ctx.signal.removeEventListener('abort', cancel);
    await child.close();
  }
}

/**
 * Where the child's run stands once this call has done what it can: waiting for an answer its
 * parent has not given yet, or the result of the child's run (taken as recorded, or of the
 * attempt this call ran: a respond with the answer the parent recorded, a continue, the prompt).
 */
async function childState(
  host: ChildHost,
  child: ExecutionSession,
  childId: string,
  mark: Extract<AgentMark, { kind: 'agent' }>,
  args: unknown,
  ctx: ToolContext,
): Promise<{ waiting: PendingRequest } | { result: ExecutionResult }> {
  const asked = child.pendingRequest;
  if (asked) {
    // the child waits for an answer: the one its parent's respond recorded, if given yet
    const { questionId } = asked;
    const routed = await routedAnswer(
      host.store,
      { sessionId: ctx.sessionId, fromSeq: ctx.callSeq ?? 1 },
      { sessionId: childId, runId: CHILD_RUN, questionId },
    );
    if (!routed) return { waiting: asked };
    const { attemptId, answer } = routed;
    return { result: await child.execute({ kind: 'respond', runId: CHILD_RUN, attemptId, questionId, answer }) };
  }
  const recorded = await currentRunResult(host.store, childId, CHILD_RUN);
  if (recorded) return { result: recorded }; // settled before: its answer, no model call
  if (child.recovery.interruptedRuns.some((r) => r.runId === CHILD_RUN))
    return { result: await child.execute({ kind: 'continue', runId: CHILD_RUN, attemptId: `continue-${randomUUID()}` }) };
  const message = mark.ownParameters ? JSON.stringify(args) : (args as { input: string }).input;
  return { result: await child.execute({ kind: 'prompt', runId: CHILD_RUN, attemptId: CHILD_RUN, message }) };
}

/** A child's run that ended so is still open: the parent's call waits with it. */
const OPEN = new Set<ExecutionResult['status']>(['suspended', 'detached', 'fenced']);

const cancelledOutcome = (agent: string): ToolOutcomeInput => ({
  kind: 'cancelled',
  settled: true,
  partialContent: `the ${agent} agent was cancelled with its parent run`,
  resourceLocks: [],
});

/** The call's result from the child's: its answer (structured output as JSON), else what became of it; with the child's usage. */
function outcomeOf(agent: string, childId: string, r: ExecutionResult, child: ExecutionSession): ToolReturn {
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
  if (r.status === 'stopped') {
    // stopped after its round (its parent's stop reached it): what it had, its latest text
    const had = latestText(child);
    return {
      kind: 'completed',
      content: `the ${agent} agent (session ${childId}) stopped after its round${had ? `; what it had: ${had}` : ' with no answer'}${note}`,
      isError: false,
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

/** The text of the child's latest assistant message, if any. */
function latestText(child: ExecutionSession): string {
  const messages = child.snapshot().messages;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === 'assistant' && contentText(m.content).trim() !== '') return contentText(m.content);
  }
  return '';
}
