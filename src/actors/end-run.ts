import { promiseActor } from './promise-actor.js';
import type { StepPosition } from '../contracts/calls.js';
import type { ToolOutcome } from '../contracts/tools.js';
import { isWriterStopped } from '../contracts/errors.js';
import { ownRecord } from '../contracts/keyed.js';
import { redactSecrets } from '../providers/redact.js';
import type { Message, Usage } from '../contracts/message.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { LogWriter } from '../persistence/log-writer.js';
import { runEndEventId } from '../persistence/run-ids.js';
import type { ChildOfCall } from './run-children.js';
import type { Counted } from '../contracts/reservation.js';
import { servicesIn, type ServicesSource, type SessionServices } from './session-services.js';

export interface EndRunInput {
  at: StepPosition;
  result: ExecutionResult;
  /**
   * Whether the attempt's first commit (run/start) landed. If not, the attempt wrote nothing and
   * writes no run/end either: the log stays as before it (a suspended run still waits for its
   * answer, a new run was never recorded) — as after a crash before run/start.
   */
  started: boolean;
  /** A step left open by a cancel (its answer was verified, never committed): its step/end, with its usage. */
  openStep?: { usage?: Usage };
  /**
   * Agent calls the step left without a result (their child waits or was detached) in a run that
   * ends settled all the same (it was cancelled, or its results commit failed): each is answered
   * `cancelled`, naming its child session's run as left open, and the step ends.
   */
  unanswered?: UnsettledCall[];
  /**
   * The step's tool calls a cancel kept from running after their request (an approval, a question)
   * was committed: each gets a `skipped` result (the run never waits on that request).
   */
  unrun?: { callId: string; name: string }[];
}

/**
 * The run's closing commit: `run/end` (with what the attempt staged before it: a delivery outcome,
 * a failed step's results). A fenced writer cannot commit: the result then says so
 * (`checkpointCommitted: false`).
 */
export async function endRun(env: SessionServices, input: EndRunInput): Promise<ExecutionResult> {
  const r = input.result;
  if (!input.started || env.writer.fenced) {
    env.writer.discard();
    return { ...r, checkpointCommitted: false };
  }
  answerStagedCalls(env.writer, input.at);
  answerUnsettledCalls(env.writer, input.at, input.unanswered ?? [], r.status);
  for (const c of input.unrun ?? [])
    env.writer.stage('tool/result', input.at, {
      callId: c.callId,
      name: c.name,
      outcome: { kind: 'skipped', reason: 'not run: the run was cancelled as it suspended for an answer' },
    });
  if (input.openStep) env.writer.stage('step/end', input.at, input.openStep.usage ? { usage: input.openStep.usage } : {});
  stageRunEnd(env.writer, input.at, r);
  try {
    await env.writer.commit();
    return r;
  } catch (e) {
    env.writer.discard();
    if (isWriterStopped(e)) {
      return {
        ...r,
        outcome: 'incomplete',
        status: 'fenced',
        error: { kind: 'inconsistent', message: e.message, cause: e },
        checkpointCommitted: false,
      };
    }
    return { ...r, checkpointCommitted: false, historyConsistent: false };
  }
}

/**
 * A run never ends with the model's tool calls unanswered on the surface (providers refuse a next
 * request with such calls): an assistant message staged with tool calls that got neither a result
 * nor an intent (the run was cancelled as the model answered) gets `skipped` results here.
 */
function answerStagedCalls(writer: LogWriter, at: StepPosition): void {
  const staged = writer.stagedDrafts;
  const answered = new Set<string>();
  for (const d of staged) if (d.type === 'tool/result' || d.type === 'tool/call') answered.add(d.payload.callId as string);
  const open = staged
    .flatMap((d) => (d.type === 'assistant/message' ? ((d.payload.message as Message).toolCalls ?? []) : []))
    .filter((c) => !answered.has(c.id));
  for (const c of open)
    writer.stage('tool/result', at, {
      callId: c.id,
      name: c.name,
      outcome: { kind: 'skipped', reason: 'not run: the run was cancelled as the model answered' },
    });
  if (open.length > 0 && !staged.some((d) => d.type === 'step/end')) writer.stage('step/end', at, {});
}

/**
 * An agent call left without a result: its child waits for an answer (`asked`: that child session)
 * or was detached, or the run was cancelled before the call resumed it; `child`: what the run's
 * cancel did to its child session.
 */
export interface UnsettledCall {
  callId: string;
  name: string;
  asked?: string;
  child?: ChildOfCall;
  /** What its child had spent when the call was left (held in the run's figures while the run waits on it). */
  held?: Counted;
}

/**
 * The `cancelled` outcome of an agent call left unsettled in a run that settles `status`: in a
 * cancelled run, what became of its child session's run (cancelled with it, with its spending;
 * settled before; never started) — else the child session whose run it leaves open (waiting for an
 * answer, or detached: nothing of it runs).
 */
export function unsettledAnswer(
  status: string,
  asked: string | undefined,
  child?: ChildOfCall,
): Extract<ToolOutcome, { kind: 'cancelled' }> {
  const named = child?.childId ?? asked;
  const left =
    child?.became === 'cancelled'
      ? `the run of its child session ${named} was cancelled with it`
      : child?.became === 'settled'
        ? `the run of its child session ${named} had ended ${child.status}`
        : child && child.became === undefined
          ? `its child session ${named} never started its run`
          : named
            ? `the run of its child session ${named} stays open${child?.why ? ` (${child.why})` : asked ? ', waiting for its answer' : ''}`
            : `its child session's run is left open`;
  return {
    kind: 'cancelled',
    settled: true,
    partialContent: `the run ended ${status} before the agent answered; ${left}`,
    resourceLocks: [],
    ...child?.spending,
  };
}

const SUSPENDING: ReadonlySet<string> = new Set(['question/asked', 'approval/requested', 'run/suspended']);

function answerUnsettledCalls(writer: LogWriter, at: StepPosition, calls: readonly UnsettledCall[], status: string): void {
  if (calls.length === 0) return;
  // a child's request staged with them (its commit failed): the settled run never waits on it
  writer.unstage(SUSPENDING);
  for (const c of calls)
    writer.stage('tool/result', at, { callId: c.callId, name: c.name, outcome: unsettledAnswer(status, c.asked, c.child) });
  if (!writer.stagedDrafts.some((d) => d.type === 'step/end')) writer.stage('step/end', at, {});
}

/**
 * Stages an attempt's `run/end`, carrying its whole result (the typed error cause as JSON), under
 * the attempt's deterministic event id — so executing that attempt again returns it.
 */
export function stageRunEnd(writer: LogWriter, at: StepPosition, r: ExecutionResult): void {
  const storable = { ...r, error: r.error ? { kind: r.error.kind, message: r.error.message, cause: causeInfo(r.error.cause) } : undefined };
  writer.stage(
    'run/end',
    at,
    {
      runId: r.runId,
      attemptId: r.attemptId,
      status: r.status,
      outcome: r.outcome,
      usage: r.usage,
      ...(r.error ? { error: { message: r.error.message, code: r.error.kind } } : {}),
      result: JSON.parse(JSON.stringify(storable)) as Record<string, unknown>,
    },
    runEndEventId(r.runId, r.attemptId),
  );
}

/**
 * A JSON form of an error cause: its name, message and own fields that are JSON — scalars, lists
 * (at most 100 items) and plain objects, four levels deep (an OutputValidationError's `issues`, a
 * ValidationError's, a SessionHeldError's `holder`, a ProviderError's `providerLimits`) — strings
 * redacted (header values, tokens); an Error inside (its `cause`) is left out. The `is*Error`
 * guards recognise it by its `code` and name.
 */
export function causeInfo(cause: unknown): Record<string, unknown> | undefined {
  if (!cause || typeof cause !== 'object') return undefined;
  const out = ownRecord<unknown>([
    ['name', (cause as Error).name],
    ['message', redactSecrets(String((cause as Error).message))],
  ]);
  for (const [k, v] of Object.entries(cause)) {
    const json = recordable(v, 0);
    if (json !== undefined) out[k] = json;
  }
  return out;
}

function recordable(v: unknown, depth: number): unknown {
  if (typeof v === 'string') return redactSecrets(v);
  if (typeof v === 'number' || typeof v === 'boolean') return v;
  if (depth >= 4 || typeof v !== 'object' || v === null) return undefined;
  if (Array.isArray(v))
    return v
      .slice(0, 100)
      .map((x) => (x === null ? null : recordable(x, depth + 1)))
      .filter((x) => x !== undefined);
  const proto: unknown = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return undefined;
  const out = ownRecord<unknown>();
  for (const [k, x] of Object.entries(v)) {
    const json = recordable(x, depth + 1);
    if (json !== undefined) out[k] = json;
  }
  return out;
}

/**
 * The `endRun` actor of the run machine, bound to one session's services.
 * @example
 * runMachine.provide({ actors: { endRun: endRunActor(services) } })
 */
export const endRunActor = (env: ServicesSource) =>
  promiseActor<ExecutionResult, EndRunInput>(({ input, system }) => endRun(servicesIn(env, system), input));
