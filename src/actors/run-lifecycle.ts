import { isStaleWriterError, ValidationError } from '../contracts/errors.js';
import { MAX_ID_KEY_BYTES } from '../persistence/codec.js';
import type { Message, Usage } from '../contracts/message.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { ResumeInput, StartRunOutput } from '../machines/run.machine.js';
import type { CallDescr } from './model-step.js';
import { normalizeOutcome, skippedOutput, withCallLocks, type ToolCallOutput } from './tool-call.js';
import { emitToolEnds } from './commit-results.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { RunEnv } from './run-env.js';
import { redactSecrets } from '../providers/redact.js';

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
}

export const runStartEventId = (runId: string, attemptId: string) => `run-start:${runId}:${attemptId}`;
export const runEndEventId = (runId: string, attemptId: string) => `run-end:${runId}:${attemptId}`;
/** The id of a run's first run/start (a prompt or follow-up): one per runId in a session. */
export const runOpenEventId = (runId: string) => `run-open:${runId}`;

/**
 * Refuses, before anything is written, a runId/attemptId pair whose run events' ids would not fit
 * the store's id key with the session id (MAX_ID_KEY_BYTES): such a run could start and deliver,
 * then fail to write its run/end and stay open for ever. `fields` names what the caller passed.
 */
export function assertRunIdsFit(sessionId: string, runId: string, attemptId: string, where: string, fields: readonly [string, string]): void {
  const id = runStartEventId(runId, attemptId); // the longest id a run writes (a respond's or continue's run/start)
  if (sessionId.length + id.length <= MAX_ID_KEY_BYTES / 3) return; // fits whatever the characters
  const bytes = Buffer.byteLength(sessionId) + Buffer.byteLength(id);
  if (bytes <= MAX_ID_KEY_BYTES) return;
  const field = Buffer.byteLength(attemptId) > Buffer.byteLength(runId) ? fields[1] : fields[0];
  throw new ValidationError(where, [
    {
      path: [field],
      message: `too long: the run's event ids (run-start:<${fields[0]}>:<${fields[1]}>) and the session id would take ${bytes} bytes in UTF-8; the store takes at most ${MAX_ID_KEY_BYTES}`,
    },
  ]);
}

/**
 * A call rebuilt from the log gets what its tool's `execute` got on the direct path: the schema's
 * parsed output (defaults, transforms), parsed again from the model's text — not the JSON copy.
 * `mismatch`: the text no longer fits the tool's schema (the tool changed since the call was
 * logged, or is gone): such a call must not run with it. A log from before `rawArguments` has only
 * the JSON copy: it is parsed, and a copy the schema refuses is a mismatch too.
 */
export function withParsedArguments(env: RunEnv, c: CallDescr): { call: CallDescr; mismatch?: string } {
  const tool = env.tools.get(c.name);
  if (!tool) return { call: c, mismatch: `the ${c.name} tool is no longer registered` };
  if (typeof c.rawArguments !== 'string') {
    const legacy = tool.parameters.safeParse(c.arguments);
    if (legacy.success) return { call: { ...c, arguments: legacy.data } };
    return { call: c, mismatch: `its logged arguments no longer match the ${c.name} tool's schema (${legacy.error.issues[0]?.message ?? 'invalid'})` };
  }
  let json: unknown;
  try {
    json = c.rawArguments.trim() === '' ? {} : JSON.parse(c.rawArguments);
  } catch {
    return { call: c, mismatch: 'its arguments are not JSON' };
  }
  const parsed = tool.parameters.safeParse(json);
  if (parsed.success) return { call: { ...c, arguments: parsed.data } };
  return { call: c, mismatch: `its arguments no longer match the ${c.name} tool's schema (${parsed.error.issues[0]?.message ?? 'invalid'})` };
}

const denied = (c: CallDescr, why: string): ToolCallOutput => ({
  callId: c.callId,
  name: c.name,
  outcome: { kind: 'completed', content: why, isError: true, concludesTurn: false, releaseResources: [] },
  startedAt: Date.now(),
  endedAt: Date.now(),
});

/**
 * A respond attempt's decisions: approvals (a call left out, or an answer after the deadline,
 * is denied) or the question's answer as the askUser call's result. Stages what it decides.
 */
async function stageResume(env: RunEnv, r: ResumeInput, at: { turn: number; step: number; attempt: number }, runId: string): Promise<NonNullable<StartRunOutput['resumed']>> {
  if (r.kind === 'recover') return recoverCalls(env, r.batch, runId, r.released ?? {});
  const preset: ToolCallOutput[] = [];
  const calls: CallDescr[] = [];
  const pr = r.pendingRequest;
  if (pr.kind === 'question') {
    const content = typeof r.answer === 'string' ? r.answer : JSON.stringify(r.answer);
    for (const c of r.batch) {
      preset.push(c.callId === pr.callId ? { callId: c.callId, name: c.name, outcome: { kind: 'completed', content, isError: false, concludesTurn: false, releaseResources: [] }, startedAt: Date.now(), endedAt: Date.now() } : denied(c, 'not run: asked alongside a question'));
    }
    return { calls, preset };
  }
  const given = r.timedOut ? {} : ((r.answer as { decisions?: Record<string, 'approve' | 'deny'> }).decisions ?? {});
  const decisions: Record<string, 'approve' | 'deny'> = {};
  for (const c of pr.calls) decisions[c.callId] = given[c.callId] === 'approve' ? 'approve' : 'deny';
  env.writer.stage('approval/decided', at, { questionId: pr.questionId, decisions, timedOut: r.timedOut });
  for (const c of r.batch) {
    if (decisions[c.callId] === 'deny') {
      // committed with the decision (not with the batch's results): a crash before those must
      // not leave the denied call without its result (the model reads it; providers need it)
      const d = denied(c, r.timedOut ? 'The approval request expired (no answer in time); this call was not run.' : 'The user denied this tool call; it was not run.');
      env.writer.stage('tool/result', at, { callId: d.callId, name: d.name, outcome: d.outcome, startedAt: d.startedAt, endedAt: d.endedAt });
    } else {
      const { call, mismatch } = withParsedArguments(env, c);
      if (mismatch) {
        // approved, but the tool has changed since: never run with arguments it does not accept
        const d = denied(c, `This tool call was approved but not run: ${mismatch}.`);
        env.writer.stage('tool/result', at, { callId: d.callId, name: d.name, outcome: d.outcome, startedAt: d.startedAt, endedAt: d.endedAt });
        continue;
      }
      env.writer.stage('tool/call', at, { ...c });
      calls.push(call);
    }
  }
  return { calls, preset };
}

/**
 * DESIGN §5: calls whose intent was logged but whose result never was. A `parallel` (side-effect
 * free) call runs again; an `exclusive` one is never silently re-executed: its `reconcile` is
 * asked (with the same idempotencyKey), and without an answer it becomes `uncertain-hanging`,
 * its resources staying locked until released.
 */
async function recoverCalls(env: RunEnv, batch: CallDescr[], runId: string, released: Readonly<Record<string, string[]>>): Promise<NonNullable<StartRunOutput['resumed']>> {
  const calls: CallDescr[] = [];
  const preset: ToolCallOutput[] = [];
  // A parallel call runs again unless it names a resource an uncertain call keeps locked (DESIGN
  // §4 item 5; skipping a side-effect-free call loses nothing). An exclusive call is never
  // skipped here: the one before it may have finished before the crash and it may have run, so it
  // gets its own resolution.
  const locked = new Map<string, string>([...env.heldLocks].map((k) => [k, 'an earlier uncertain call']));
  for (const logged of batch) {
    // (reconcile is asked even when the arguments no longer fit: the call may have run)
    const { call: c, mismatch } = withParsedArguments(env, logged);
    const tool = env.tools.get(c.name);
    if (c.mode === 'parallel' && tool) {
      const held = c.resources.filter((r) => locked.has(r));
      if (mismatch) preset.push(skippedOutput(c, `not run again: ${mismatch}`));
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
          signal: env.cancelSignal,
          idempotencyKey: c.idempotencyKey,
          sessionId: env.sessionId,
          runId,
          callId: c.callId,
          emit: () => {},
        });
        if (got !== undefined) outcome = withCallLocks(normalizeOutcome(got), c);
      } catch {
        outcome = undefined;
      }
    }
    // resources the app released since the intent (after checking them) are not locked again
    const locks = released[c.callId] ? c.resources.filter((r) => !released[c.callId]!.includes(r)) : c.resources;
    outcome ??= {
      kind: 'uncertain-hanging',
      content: `the process stopped after this ${c.name} call was announced and before its result was recorded; whether it ran or took effect is unknown${tool?.reconcile ? ' (reconcile could not tell)' : ''}`,
      resourceLocks: locks,
    };
    preset.push({ callId: c.callId, name: c.name, outcome, startedAt: Date.now(), endedAt: Date.now() });
    if (outcome.kind === 'uncertain-hanging' || (outcome.kind === 'cancelled' && !outcome.settled)) for (const r of locks) locked.set(r, `call ${c.callId}`);
  }
  return { calls, preset };
}

/** The run's first commit point: `run/start` with the prompt's user messages (or a respond's decisions). */
export const startRunOp =
  (env: RunEnv) =>
  async (input: StartRunInput): Promise<StartRunOutput> => {
    const at = { turn: input.turn, step: input.resume?.step ?? 0, attempt: input.runEpoch };
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
      },
      input.kind === 'prompt' || input.kind === 'follow_up' ? runOpenEventId(input.runId) : runStartEventId(input.runId, input.attemptId),
    );
    for (const m of input.messages) env.writer.stage('user/message', at, { message: m });
    const resumed = input.resume ? await stageResume(env, input.resume, at, input.runId) : undefined;
    const records = await env.writer.commit();
    // envelopes of committed events carry their logSeq (DESIGN §6)
    const startSeq = records.find((r) => r.type === 'run/start')?.seq;
    env.emit(
      {
        type: 'run_start',
        sessionInstanceId: env.sessionInstanceId,
        runId: input.runId,
        attemptId: input.attemptId,
        runEpoch: input.runEpoch,
        turn: input.turn,
      },
      startSeq,
    );
    if (input.inputId) env.emit({ type: 'input_committed', inputId: input.inputId, durability: 'durable' }, startSeq);
    emitToolEnds(env, records); // denied calls' results, committed with the decision
    // compaction keeps the whole run, not only this attempt: an earlier attempt's tool calls and
    // their results (e.g. an approved batch) must stay together
    return { runStartSeq: input.runFirstSeq ?? records[0]!.seq, ...(resumed ? { resumed } : {}) };
  };

export interface EndRunInput {
  turn: number;
  step: number;
  attempt: number;
  result: ExecutionResult;
  /**
   * Whether the attempt's first commit (run/start) landed. If not, the attempt wrote nothing and
   * writes no run/end either: the log stays as before it (a suspended run still waits for its
   * answer, a new run was never recorded) — as after a crash before run/start.
   */
  started?: boolean;
}

/**
 * The run's closing commit: `run/end` (with the delivery outcome staged before it). A fenced
 * writer cannot commit: the result then says so (`checkpointCommitted: false`).
 */
export const endRunOp =
  (env: RunEnv) =>
  async (input: EndRunInput): Promise<ExecutionResult> => {
    const r = input.result;
    const at = { turn: input.turn, step: input.step, attempt: input.attempt };
    if (input.started === false) {
      env.writer.discard();
      return { ...r, checkpointCommitted: false };
    }
    if (env.writer.fenced) {
      env.writer.discard();
      return { ...r, checkpointCommitted: false };
    }
    stageRunEnd(env, at, r);
    try {
      const records = await env.writer.commit();
      // what a failed step staged before the run ended (skipped results, its step/end) is
      // committed here: its envelopes too
      emitToolEnds(env, records);
      const stepEnd = records.find((x) => x.type === 'step/end');
      if (stepEnd) env.emit({ type: 'step_end', step: stepEnd.step, ...(stepEnd.payload.usage ? { usage: stepEnd.payload.usage as Usage } : {}) }, stepEnd.seq);
      return r;
    } catch (e) {
      env.writer.discard();
      if (isStaleWriterError(e)) {
        return { ...r, outcome: 'incomplete', status: 'fenced', error: { kind: 'inconsistent', message: e.message, cause: e }, checkpointCommitted: false };
      }
      return { ...r, checkpointCommitted: false, historyConsistent: false };
    }
  };

/**
 * Stages an attempt's `run/end`, carrying its whole result (the typed error cause as JSON), under
 * the attempt's deterministic event id — so executing that attempt again returns it.
 */
export function stageRunEnd(env: RunEnv, at: { turn: number; step: number; attempt: number }, r: ExecutionResult): void {
  const storable = { ...r, error: r.error ? { kind: r.error.kind, message: r.error.message, cause: causeInfo(r.error.cause) } : undefined };
  env.writer.stage(
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

/** A JSON form of an error cause: its name, message and own scalar fields (header values and tokens redacted). */
export function causeInfo(cause: unknown): Record<string, unknown> | undefined {
  if (!cause || typeof cause !== 'object') return undefined;
  const out: Record<string, unknown> = { name: (cause as Error).name, message: redactSecrets(String((cause as Error).message)) };
  for (const [k, v] of Object.entries(cause)) if (['string', 'number', 'boolean'].includes(typeof v)) out[k] = typeof v === 'string' ? redactSecrets(v) : v;
  return out;
}
