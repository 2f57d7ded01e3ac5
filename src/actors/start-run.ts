import { promiseActor } from './promise-actor.js';
import type { StepPosition, ToolCallIntent, ToolCallOutput } from '../contracts/calls.js';
import type { PendingRequest } from '../contracts/events.js';
import type { Message } from '../contracts/message.js';
import type { ToolOutcome } from '../contracts/tools.js';
import { runOpenEventId, runStartEventId } from '../persistence/run-ids.js';
import { mayStillRun } from '../contracts/locks.js';
import { assertJson } from '../contracts/json.js';
import { withParsedArguments } from '../tools/logged-call.js';
import { normalizeOutcome, skippedOutput, textOnly, withCallLocks } from './tool-call.js';
import { NO_TOOLS, servicesIn, type ServicesSource, type SessionServices } from './session-services.js';
import type { AnyTool } from '../tools/define-tool.js';
import type { Reservation } from '../contracts/reservation.js';
import type { OutputSpec } from './final-output.js';

/**
 * What a `respond` attempt resumes (the batch held back by an approval or a question), or what a
 * `continue` after a crash resolves (`recover`: tool calls whose intent is logged without result).
 * `released`: per call id, the resources the app released since the intent.
 */
export type ResumeInput =
  | { kind: 'answer'; step: number; batch: ToolCallIntent[]; pendingRequest: PendingRequest; answer: unknown; timedOut: boolean }
  | { kind: 'recover'; step: number; batch: ToolCallIntent[]; released?: ReadonlyMap<string, readonly string[]> };

export interface StartRunInput {
  runId: string;
  attemptId: string;
  runEpoch: number;
  turn: number;
  kind: 'prompt' | 'respond' | 'continue' | 'follow_up';
  messages: Message[];
  executionProfileFingerprint: string;
  /** The follow-up input this run consumes. */
  inputId?: string;
  resume?: ResumeInput;
  /** Seq of the run's first run/start (a respond or continue attempt). */
  runFirstSeq?: number;
  /** The attempt's tools (absent: none): a resumed call is checked against them. */
  tools?: ReadonlyMap<string, AnyTool>;
  /** The run's output schema, recorded in run/start. */
  output?: OutputSpec;
  /** A continue's reservation for the crashed attempt's possibly-sent model call, recorded in run/start (docs/guarantees.md). */
  recoveredReservation?: Reservation;
  /** The attempt starts cancelled: a recovered side-effect-free call is not run again (skipped). */
  cancelled?: boolean;
  /** The attempt starts cancelled by a cancel not in the log yet: recorded with run/start (its reason). */
  cancelToRecord?: string;
  /** That record's event id, if it has one. */
  cancelRecordId?: string;
}

/** The run/start seq and, for a respond or recovering attempt, what to run or record. */
export interface StartRunOutput {
  runStartSeq: number;
  resumed?: { calls: ToolCallIntent[]; preset: ToolCallOutput[] };
}

const denied = (c: ToolCallIntent, why: string, now: number): ToolCallOutput => ({
  callId: c.callId,
  name: c.name,
  outcome: { kind: 'completed', content: why, isError: true, concludesTurn: false, releaseResources: [] },
  startedAt: now,
  endedAt: now,
});

/**
 * Each asked call's decision from a respond's answer (DESIGN §4 item 4): `approve` only where the
 * answer says so; a call left out, or every call of an expired request (`answer` undefined), is
 * denied. Keyed by call id in a Map: call ids come from the model.
 */
export function approvalDecisions(asked: readonly { callId: string }[], answer: unknown): Map<string, 'approve' | 'deny'> {
  const given = (answer as { decisions?: Record<string, unknown> } | undefined)?.decisions;
  const approved = (id: string) => given !== undefined && Object.hasOwn(given, id) && given[id] === 'approve';
  return new Map(asked.map((c) => [c.callId, approved(c.callId) ? ('approve' as const) : ('deny' as const)]));
}

/**
 * A respond attempt's decisions: approvals (a call left out, or an answer after the deadline,
 * is denied) or the question's answer as the askUser call's result. Stages what it decides.
 */
async function stageResume(
  env: SessionServices,
  tools: ReadonlyMap<string, AnyTool>,
  r: ResumeInput,
  at: StepPosition,
  runId: string,
  cancelled: boolean,
  signal: AbortSignal,
): Promise<NonNullable<StartRunOutput['resumed']>> {
  if (r.kind === 'recover') return recoverCalls(env, tools, r, runId, cancelled, signal);
  const now = env.clock.now();
  const preset: ToolCallOutput[] = [];
  const calls: ToolCallIntent[] = [];
  const pr = r.pendingRequest;
  if (pr.path) {
    // a child's request (its answer recorded in run/start): the agent calls it held back run
    // again, the one asked routing the answer down to its child
    for (const logged of r.batch) {
      const { call, mismatch } = withParsedArguments(tools, logged);
      if (mismatch) preset.push(skippedOutput(call, `not run again: ${mismatch}`));
      else calls.push(call);
    }
    return { calls, preset };
  }
  if (pr.kind === 'question') {
    const content = typeof r.answer === 'string' ? r.answer : JSON.stringify(r.answer);
    for (const c of r.batch) {
      preset.push(
        c.callId === pr.callId
          ? {
              callId: c.callId,
              name: c.name,
              outcome: { kind: 'completed', content, isError: false, concludesTurn: false, releaseResources: [] },
              startedAt: now,
              endedAt: now,
            }
          : denied(c, 'not run: asked alongside a question', now),
      );
    }
    return { calls, preset };
  }
  const decisions = approvalDecisions(pr.calls, r.timedOut ? undefined : r.answer);
  env.writer.stage('approval/decided', at, { questionId: pr.questionId, decisions: Object.fromEntries(decisions), timedOut: r.timedOut });
  for (const c of r.batch) {
    if (decisions.get(c.callId) === 'deny') {
      // committed with the decision (not with the batch's results): a crash before those must
      // not leave the denied call without its result (the model reads it; providers need it)
      const d = denied(
        c,
        r.timedOut
          ? 'The approval request expired (no answer in time); this call was not run.'
          : 'The user denied this tool call; it was not run.',
        now,
      );
      env.writer.stage('tool/result', at, {
        callId: d.callId,
        name: d.name,
        outcome: d.outcome,
        startedAt: d.startedAt,
        endedAt: d.endedAt,
      });
    } else {
      const { call, mismatch } = withParsedArguments(tools, c);
      if (mismatch) {
        // approved, but the tool has changed since: never run with arguments it does not accept
        const d = denied(c, `This tool call was approved but not run: ${mismatch}.`, now);
        env.writer.stage('tool/result', at, {
          callId: d.callId,
          name: d.name,
          outcome: d.outcome,
          startedAt: d.startedAt,
          endedAt: d.endedAt,
        });
        continue;
      }
      // an attempt that starts cancelled announces no call: approved, it is skipped — committed with
      // the decision, as a denial is (no intent, so nothing after a crash would answer it)
      if (cancelled) {
        const { outcome } = skippedOutput(c, 'not run: the run was cancelled before the call started');
        env.writer.stage('tool/result', at, { callId: c.callId, name: c.name, outcome });
      } else {
        env.writer.stage('tool/call', at, { ...c });
        calls.push(call);
      }
    }
  }
  return { calls, preset };
}

/**
 * DESIGN §5: calls whose intent was logged but whose result never was. A `parallel` (side-effect
 * free) call runs again; an `exclusive` one is never silently re-executed: its `reconcile` is
 * asked (with the same idempotencyKey), and without an answer it becomes `uncertain-hanging`,
 * its resources staying locked until released. In an attempt that starts cancelled no parallel
 * call runs again (skipped); an agent call goes on to the batch, which answers it with its child's cancel.
 */
async function recoverCalls(
  env: SessionServices,
  tools: ReadonlyMap<string, AnyTool>,
  r: Extract<ResumeInput, { kind: 'recover' }>,
  runId: string,
  cancelled: boolean,
  signal: AbortSignal,
): Promise<NonNullable<StartRunOutput['resumed']>> {
  const { batch, released = new Map<string, readonly string[]>() } = r;
  const calls: ToolCallIntent[] = [];
  const preset: ToolCallOutput[] = [];
  // A parallel call runs again unless it names a resource an uncertain call keeps locked (DESIGN
  // §4 item 5; skipping a side-effect-free call loses nothing). An exclusive call is never
  // skipped here: the one before it may have finished before the crash and it may have run, so it
  // gets its own resolution.
  const locked = new Map<string, string>([...env.heldLocks].map((k) => [k, 'an earlier uncertain call']));
  for (const logged of batch) {
    // (reconcile is asked even when the arguments no longer fit: the call may have run)
    const { call: c, mismatch } = withParsedArguments(tools, logged);
    const tool = tools.get(c.name);
    if ((c.mode === 'parallel' || c.resumable) && tool) {
      const held = c.resources.filter((r) => locked.has(r));
      if (mismatch) preset.push(skippedOutput(c, `not run again: ${mismatch}`));
      else if (cancelled && !c.resumable) preset.push(skippedOutput(c, 'not run again: the run was cancelled'));
      else if (held.length === 0) calls.push(c);
      else {
        const reason = `not run: ${held.join(', ')} stay locked by ${locked.get(held[0]!)}, which may still be running`;
        preset.push(skippedOutput(c, reason));
      }
      continue;
    }
    let outcome: ToolOutcome | undefined;
    if (tool?.reconcile) {
      try {
        const got = await tool.reconcile(c.arguments, {
          signal,
          idempotencyKey: c.idempotencyKey,
          sessionId: env.sessionId,
          runId,
          callId: c.callId,
          // nothing is sent from reconcile; a value that is not JSON is refused as in execute
          emit: (update: unknown) => assertJson(update, 'ctx.emit: update'),
        });
        // a reconciled outcome is text: bytes from reconcile are refused (stored only from execute)
        if (got !== undefined) outcome = withCallLocks(textOnly(normalizeOutcome(got, c.name), c.name), c);
      } catch {
        outcome = undefined;
      }
    }
    // resources the app released since the intent (after checking them) are not locked again
    const freed = released.get(c.callId);
    const locks = freed ? c.resources.filter((r) => !freed.includes(r)) : c.resources;
    outcome ??= {
      kind: 'uncertain-hanging',
      content:
        `the process stopped after this ${c.name} call was announced and before its result was recorded; ` +
        `whether it ran or took effect is unknown${tool?.reconcile ? ' (reconcile could not tell)' : ''}`,
      resourceLocks: locks,
    };
    const now = env.clock.now();
    preset.push({ callId: c.callId, name: c.name, outcome, startedAt: now, endedAt: now });
    if (mayStillRun(outcome)) for (const r of locks) locked.set(r, `call ${c.callId}`);
  }
  return { calls, preset };
}

/** A respond's answer to a child's request (its pendingRequest has a path), as run/start records it. */
function answeredOf(r: ResumeInput | undefined): { questionId: string; path: string[]; answer: unknown } | undefined {
  if (r?.kind !== 'answer' || !r.pendingRequest.path) return undefined;
  return { questionId: r.pendingRequest.questionId, path: r.pendingRequest.path, answer: r.answer };
}

/** The run's first commit point: `run/start` with the prompt's user messages (or a respond's decisions). */
export async function startRun(env: SessionServices, input: StartRunInput, signal: AbortSignal): Promise<StartRunOutput> {
  const at = { turn: input.turn, step: input.resume?.step ?? 0, attempt: input.runEpoch };
  const trace = env.tracer ? await env.tracer.attemptStarting(input) : undefined;
  env.writer.stage(
    'run/start',
    at,
    {
      runId: input.runId,
      attemptId: input.attemptId,
      runEpoch: input.runEpoch,
      kind: input.kind,
      executionProfileFingerprint: input.executionProfileFingerprint,
      ...(input.inputId ? { inputId: input.inputId } : {}),
      ...(trace ? { trace } : {}),
      ...(input.output ? { output: input.output.record } : {}),
      ...(input.recoveredReservation ? { recoveredReservation: input.recoveredReservation } : {}),
      ...(env.agent ? { agent: env.agent.name } : {}),
      ...(env.agent?.parent ? { parent: env.agent.parent } : {}),
      ...(answeredOf(input.resume) ? { answered: answeredOf(input.resume) } : {}),
    },
    input.kind === 'prompt' || input.kind === 'follow_up' ? runOpenEventId(input.runId) : runStartEventId(input.runId, input.attemptId),
  );
  for (const m of input.messages) env.writer.stage('user/message', at, { message: m });
  // durable with the attempt's start: if it stops before its cancelled end, the next attempt starts cancelled too
  if (input.cancelToRecord !== undefined)
    env.writer.stage(
      'cancellation/requested',
      { turn: 0, step: 0, attempt: input.runEpoch },
      { reason: input.cancelToRecord, runId: input.runId, attemptId: input.attemptId },
      input.cancelRecordId,
    );
  const resumed = input.resume
    ? await stageResume(env, input.tools ?? NO_TOOLS.tools, input.resume, at, input.runId, input.cancelled ?? false, signal)
    : undefined;
  const records = await env.writer.commit();
  // compaction keeps the whole run, not only this attempt: an earlier attempt's tool calls and
  // their results (e.g. an approved batch) must stay together
  return { runStartSeq: input.runFirstSeq ?? records[0]!.seq, ...(resumed ? { resumed } : {}) };
}

/**
 * The `startRun` actor of the run machine, bound to one session's services.
 * @example
 * runMachine.provide({ actors: { startRun: startRunActor(services) } })
 */
export const startRunActor = (env: ServicesSource) =>
  promiseActor<StartRunOutput, StartRunInput>(({ input, signal, system }) => startRun(servicesIn(env, system), input, signal));
