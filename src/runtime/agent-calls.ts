import { randomUUID } from 'node:crypto';
import type { ExecutionResult } from '../contracts/requests.js';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import type { JsonValue } from '../contracts/json.js';
import type { EventStore } from '../persistence/event-store.js';
import { sha256 } from '../persistence/surface.js';
import { writerHoldsOf, writerMayActOf } from '../actors/tool-call.js';
import { StaleWriterError } from '../contracts/errors.js';
import type { AgentMark } from '../tools/agent-marks.js';
import type { AnyTool, ToolContext, ToolReturn } from '../tools/define-tool.js';
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
  /** `guard`: the child's writer is fenced (with the error it returns) once its parent's writer no longer holds the parent. */
  open(sessionId: string, agent: string, parent: ParentLink, guard?: (writerEpoch: number) => unknown): Promise<ExecutionSession>;
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
  const parent: ParentLink = {
    sessionId: ctx.sessionId,
    runId: ctx.runId,
    callId: ctx.callId,
    ...(ctx.callSeq !== undefined ? { seq: ctx.callSeq } : {}),
  };
  let child: ExecutionSession | undefined;
  const cancel = () => void child?.requestCancel('the parent run was cancelled');
  ctx.signal.addEventListener('abort', cancel, { once: true });
  try {
    // Each try opens the child afresh, reading its log. A result its log does not hold (an append
    // failed or went unacknowledged: the run is still open there) or a failure to open or read it
    // is not the child's answer: the next try takes, or continues, what the log holds.
    // the parent's writer, read again before each effect on the child: a writer fenced meanwhile
    // (another process took the parent over, and resumes this call) neither opens nor runs it
    const holds = writerHoldsOf(ctx) ?? (async () => true);
    // and the child's own writer is guarded by the parent's: a child a fenced parent left running commits nothing more
    const mayAct = writerMayActOf(ctx);
    const guard = mayAct && ((epoch: number) => (mayAct() ? undefined : parentLost(childId, epoch)));
    let why = '';
    for (let tries = 1; tries <= CHILD_TRIES; tries++) {
      try {
        if (!(await holds())) return NOT_HELD;
        child = await host.open(childId, mark.agent.name, parent, guard);
        const result = await childResult(host, child, childId, mark, args, ctx.signal, holds);
        if (result === 'cancelled') return cancelledOutcome(mark.agent.name);
        if (result === 'not held') return NOT_HELD;
        if (result.checkpointCommitted) return outcomeOf(mark.agent.name, childId, result);
        why = result.error?.message ?? `its ${result.status} result was not recorded`;
      } catch (e) {
        if (ctx.signal.aborted) throw e;
        why = e instanceof Error ? e.message : String(e);
      } finally {
        await child?.close();
        child = undefined;
      }
    }
    return {
      kind: 'completed',
      content: `the ${mark.agent.name} agent's run in session ${childId} is left open: ${why}`,
      isError: true,
    };
  } finally {
    ctx.signal.removeEventListener('abort', cancel);
  }
}

function parentLost(childId: string, writerEpoch: number): StaleWriterError {
  const e = new StaleWriterError(childId, writerEpoch, writerEpoch);
  e.message = `session ${childId}: its parent's writer no longer holds the parent session (fenced, lease lost or closed)`;
  return e;
}

/** Tries of a call whose child's result its log does not hold (or that could not open or read it). */
const CHILD_TRIES = 4;

const NOT_HELD: ToolOutcomeInput = {
  kind: 'completed',
  content: 'not run: this writer no longer holds the session (fenced, lease lost or closed)',
  isError: true,
};

/**
 * The child's answer: recorded, or from its run (continued or started); `cancelled` when the
 * parent was cancelled first, `not held` when the parent's writer no longer holds the parent.
 */
async function childResult(
  host: ChildHost,
  child: ExecutionSession,
  childId: string,
  mark: Extract<AgentMark, { kind: 'agent' }>,
  args: unknown,
  signal: AbortSignal,
  holds: () => Promise<boolean>,
): Promise<ExecutionResult | 'cancelled' | 'not held'> {
  const recorded = await currentRunResult(host.store, childId, CHILD_RUN);
  if (recorded) return recorded; // settled (or suspended) before: its answer, no model call
  const open = (await host.store.getHead(childId))?.openRun?.runId === CHILD_RUN;
  const held = await holds();
  // checked after the last await before the child's run goes on (a cancel that came while the
  // child was idle reached no run)
  if (signal.aborted) return 'cancelled';
  if (!held) return 'not held';
  if (open) return child.execute({ kind: 'continue', runId: CHILD_RUN, attemptId: `continue-${randomUUID()}` });
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
