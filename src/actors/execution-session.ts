import { createStore } from '@xstate/store';
import type { Observable } from 'rxjs';
import { createActor, type Actor } from 'xstate';
import { z } from 'zod';
import { ExecutionBusy, isExecutionBusy, isStoreClosedError, isValidationError, SessionSteeringConflict, StoreClosedError, ValidationError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import { InputMessage, type Message } from '../contracts/message.js';
import {
  ExecutionRequest,
  InputEnvelope,
  notRunResult,
  StopRequest,
  toMessages,
  type ExecutionResult,
  type InputReceipt,
  type RecoveryOutcome,
  type StopReceipt,
} from '../contracts/requests.js';
import type { ToolOutcome } from '../contracts/tools.js';
import { parseInput } from '../contracts/validate.js';
import { JsonValue, recordOf } from '../contracts/json.js';
import type { RunInput, ResumeInput } from '../machines/run.machine.js';
import { canonicalJson } from '../persistence/codec.js';
import type { EventStore } from '../persistence/event-store.js';
import { releaseFor, type OpenRunState } from '../persistence/open-run.js';
import { loadOpenRun, settleInterruptedFinal, spentOf } from './recovery.js';
import type { Envelope, EnvelopeStream } from '../streams/envelopes.js';
import { SubscriberHub, type SubscribeOptions, type SubscriberListener, type Unsubscribe } from '../streams/subscribers.js';
import { boundSessionMachine } from './run-actors.js';
import type { RunEnv } from './run-env.js';
import { assertRunIdsFit, runEndEventId, runOpenEventId, runStartEventId } from './run-lifecycle.js';
import { UNSETTLED_END_STATUSES } from '../persistence/head.js';
import type { ResolvedRuntimeOptions } from './runtime-options.js';
import { InputQueue, type QueuedInput } from './session-inputs.js';

/** The frozen context a run was started with (DESIGN §6 `turnContexts`). */
export interface TurnContext {
  runId: string;
  turn: number;
  modelId: string;
  systemPrompt?: string;
  messages: readonly Message[];
  tools: readonly string[];
  policyRevision: string;
}

export interface SessionSnapshot {
  sessionId: string;
  status: string;
  phase: string;
  messages: Message[];
  step: number;
  toolCalls: number;
  tokens: number;
  cost: string;
  recoveries: number;
  usage?: ExecutionResult['usage'];
  pending?: unknown;
  lastError?: { kind: string; message: string };
}

/** What `openSession` hands a new ExecutionSession. */
export interface SessionDeps {
  sessionId: string;
  sessionInstanceId: string;
  writerEpoch: number;
  lastTurn: number;
  env: RunEnv;
  store: EventStore;
  options: ResolvedRuntimeOptions;
  stream: EnvelopeStream;
  fingerprint: string;
  openRun?: OpenRunState;
  recovery: RecoveryOutcome;
  inputs: QueuedInput[];
  stateContext: unknown;
  isKilled(): boolean;
}

/**
 * What a question's answer is checked against: its JSON Schema, or any JSON where that schema
 * cannot be compiled (askUser refuses such schemas when asked; a log written before may hold one).
 */
function answerSchema(schema: unknown): z.ZodType {
  let compiled: z.ZodType;
  try {
    compiled = z.fromJSONSchema(schema as never);
  } catch {
    return JsonValue;
  }
  // zod's conversion drops `required` keys that `properties` does not list: checked here too
  return compiled.superRefine((value, ctx) => {
    for (const path of missingRequired(schema, value, [])) ctx.addIssue({ code: 'custom', path, message: 'required by the question\'s schema' });
  });
}

/** Paths of keys a JSON Schema's `required` lists (at any depth of `properties` / `items`) that `value` lacks. */
function missingRequired(schema: unknown, value: unknown, at: (string | number)[]): (string | number)[][] {
  if (typeof schema !== 'object' || schema === null || typeof value !== 'object' || value === null) return [];
  const s = schema as { required?: unknown; properties?: Record<string, unknown>; items?: unknown };
  const out: (string | number)[][] = [];
  if (Array.isArray(value)) {
    value.forEach((v, i) => out.push(...missingRequired(s.items, v, [...at, i])));
    return out;
  }
  const obj = value as Record<string, unknown>;
  if (Array.isArray(s.required)) for (const k of s.required) if (typeof k === 'string' && !Object.hasOwn(obj, k)) out.push([...at, k]);
  for (const [k, sub] of Object.entries(s.properties ?? {})) if (Object.hasOwn(obj, k)) out.push(...missingRequired(sub, obj[k], [...at, k]));
  return out;
}
const ApprovalAnswer = z.object({ decisions: recordOf(z.enum(['approve', 'deny'])) });
const Checkpoint = z.strictObject({ messages: z.array(InputMessage), stateContext: JsonValue.optional() });
const key = (runId: string, attemptId: string) => `${runId}\u0000${attemptId}`;

/**
 * One open session: the durable conversation's live writer (DESIGN §6). Made by
 * `runtime.openSession`.
 * @example
 * const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })
 */
export class ExecutionSession {
  readonly sessionId: string;
  readonly sessionInstanceId: string;
  readonly actor: Actor<ReturnType<typeof boundSessionMachine>>;
  readonly turnContexts = new Map<string, TurnContext>();
  /** What opening the session found in the log (DESIGN §5). */
  readonly recovery: RecoveryOutcome;
  private readonly env: RunEnv;
  private readonly store: EventStore;
  private readonly options: ResolvedRuntimeOptions;
  private readonly stream: EnvelopeStream;
  private readonly fingerprint: string;
  private readonly isKilled: () => boolean;
  private readonly inputs: InputQueue;
  private readonly waiters = new Map<string, { runId: string; attemptId: string; resolve: (r: ExecutionResult) => void }>();
  /** Results of attempts that ended, while the session state is brought up to date. */
  private readonly finishing = new Map<string, ExecutionResult>();
  /**
   * The runId of a prompt between its checks and its start: taken synchronously, before any
   * await, so that a prompt and a follow-up racing for one id cannot both pass their checks.
   */
  private claimed: string | undefined;
  /** Inputs being accepted (registered before any await). */
  private readonly inflightInputs = new Map<string, { mode: string; promise: Promise<InputReceipt> }>();

  private runIdTaken(runId: string, field: string, where: string): ValidationError {
    return new ValidationError(where, [{ path: [field], message: `run ${runId} already exists or is being started in session ${this.sessionId}: a new run needs a new id (continue or respond to resume that run)` }]);
  }
  private readonly steering = new Map<string, { request: string; receipt: StopReceipt }>();
  private idleWaiters: (() => void)[] = [];
  private busy = false;
  private lastTurn: number;
  private lastResult?: ExecutionResult;
  private current?: { runId: string; attemptId: string; runEpoch: number };
  private openRun?: OpenRunState;
  private cancelController = new AbortController();
  /** A detach asked for while an execute was still preparing its attempt. */
  private detachPending = false;
  private cancelPending = false;
  /** The open run could not be read back after an attempt: read it again before the next one. */
  private openRunStale = false;
  /** Runs with a stop accepted after their attempt ended (still open): their next attempt stops. */
  private readonly stopAcceptedRuns = new Set<string>();
  /** An execute is preparing its attempt (reading the log): a cancel or detach now applies to it. */
  private preparing = false;
  /** The newest committed run/end: execution_finished's logSeq. */
  private lastRunEnd?: { key: string; seq: number };
  private state: unknown;
  private closed = false;
  private closing?: Promise<void>;
  private viewStore?: ReturnType<typeof makeView>;
  private readonly hub = new SubscriberHub();

  constructor(d: SessionDeps) {
    this.sessionId = d.sessionId;
    this.sessionInstanceId = d.sessionInstanceId;
    this.env = d.env;
    this.store = d.store;
    this.options = d.options;
    this.stream = d.stream;
    this.fingerprint = d.fingerprint;
    this.isKilled = d.isKilled;
    this.lastTurn = d.lastTurn;
    this.state = d.stateContext;
    this.inputs = new InputQueue(d.inputs);
    this.recovery = d.recovery;
    if (d.openRun) this.openRun = d.openRun;
    this.env.takeSteers = () => this.inputs.takeSteers().map((i) => ({ inputId: i.inputId, messages: i.messages }));
    this.hub.attach(this.stream.events$);
    this.env.backpressure = () => this.hub.whenWritable();
    this.actor = createActor(boundSessionMachine(d.env), {
      input: { sessionId: d.sessionId, sessionInstanceId: d.sessionInstanceId, writerEpoch: d.writerEpoch },
      ...(d.options.inspect ? { inspect: d.options.inspect } : {}),
    });
    this.actor.on('run.finished', ({ result }) => void this.onRunFinished(result));
    this.actor.start();
  }

  /** Every envelope of this session, live (RxJS). */
  get events$(): Observable<Envelope> {
    return this.stream.events$;
  }

  /**
   * Subscribes to this session's envelopes through a bounded queue (DESIGN §6): a non-required
   * subscriber never slows a run (overflow closes it, reported as a DeliveryError); a required one
   * receives every envelope in order and the run waits for room in its queue (checked at the
   * run's await points, so its queue may briefly exceed `capacity` by one step's envelopes).
   * Contract: `listener` may return a promise; delivery to it waits at most `deliveryTimeoutMs`.
   * @example
   * const off = session.subscribe((env) => console.log(env.event.type), { name: 'ui' })
   */
  subscribe(listener: SubscriberListener, options: SubscribeOptions = {}): Unsubscribe {
    this.assertOpen();
    return this.hub.subscribe(listener, options);
  }

  /** App JSON persisted with the session (`setStateContext` writes it). */
  get stateContext(): unknown {
    return this.state;
  }

  /** What the open (unsettled) run is waiting for, if anything. */
  get pendingRequest() {
    return this.openRun?.pending?.pendingRequest;
  }

  /**
   * Runs one attempt. Rejects only for bad input (ValidationError) or a busy session
   * (ExecutionBusy); everything that happens while running comes back as the result.
   */
  async execute(request: ExecutionRequest): Promise<ExecutionResult> {
    const req = parseInput(ExecutionRequest, request, 'session.execute');
    assertRunIdsFit(this.sessionId, req.runId, req.attemptId, 'session.execute', ['runId', 'attemptId']);
    this.assertOpen();
    if (this.busy) {
      // a recorded attempt runs nothing: its result is returned even while another attempt runs
      const cur = this.current;
      // (a log that cannot be read now: the session is busy all the same)
      const recorded = cur?.runId === req.runId && cur.attemptId === req.attemptId ? undefined : await this.recordedResult(req.runId, req.attemptId).catch(() => undefined);
      if (recorded) return recorded;
      throw new ExecutionBusy(this.sessionId, this.current?.runId ?? 'unknown');
    }
    this.busy = true;
    this.preparing = true;
    if (req.kind === 'prompt') {
      if (this.inflightInputs.get(req.runId)?.mode === 'follow_up') {
        this.settleIdle();
        throw this.runIdTaken(req.runId, 'runId', 'session.execute');
      }
      this.claimed = req.runId;
    }
    let input: RunInput;
    try {
      const recorded = await this.recordedResult(req.runId, req.attemptId);
      if (recorded) {
        this.settleIdle();
        return recorded;
      }
      // a run is one interaction: its id names its results, deliveries and final message ids
      if (req.kind === 'prompt') await this.assertNewRunId(req.runId, 'runId', 'session.execute');
      if (this.closed) {
        this.settleIdle();
        return notRunResult(req, 'detached', 'the session was closed before the attempt started');
      }
      if (this.actor.getSnapshot().value === 'fenced' || this.env.writer.fenced) {
        this.settleIdle();
        return notRunResult(req, 'fenced', 'this session instance was fenced: another writer attached to the session; open it again');
      }
      if (this.isKilled()) {
        this.settleIdle();
        return notRunResult(req, 'cancelled', 'the kill switch is set: no new attempt starts');
      }
      // a final committed by an attempt whose closing commit failed: settled as after a restart
      // (DESIGN §5: redelivered to an idempotent owner, else delivery/unknown), never a new answer
      const open = this.openRun;
      if (req.kind === 'continue' && open?.runId === req.runId && open.undeliveredFinals.length > 0) {
        let settled: OpenRunState | undefined;
        try {
          settled = await settleInterruptedFinal(this.env, { ...open, attemptId: req.attemptId });
        } catch (e) {
          this.settleIdle();
          if (this.closed || isStoreClosedError(e)) return notRunResult(req, 'detached', 'the session was closed before the attempt started');
          return { ...notRunResult(req, 'failed', `settling the run's committed final failed: ${(e as Error)?.message ?? e}; continue it again`), historyConsistent: true };
        }
        if (settled === undefined) {
          this.openRun = undefined;
          const result = (await this.recordedResult(req.runId, req.attemptId)) ?? notRunResult(req, 'failed', 'the interrupted final was settled but its run/end cannot be read back');
          this.lastResult = result;
          this.settleIdle();
          return result;
        }
      }
      if (this.openRunStale) {
        this.openRun = await this.loadOpenRun();
        this.openRunStale = false;
      }
      input = this.runInputFor(req);
    } catch (e) {
      this.settleIdle();
      // closed (or its store closed) while the attempt was still being prepared: not an input error
      if (this.closed || isStoreClosedError(e)) return notRunResult(req, 'detached', 'the session was closed before the attempt started');
      if (isValidationError(e) || isExecutionBusy(e)) throw e;
      // the log could not be read (a store error): nothing started, nothing was written — a
      // result, not a rejection (DESIGN §6); the same request can be executed again
      return { ...notRunResult(req, 'failed', `the attempt did not start: reading the session's log failed (${(e as Error)?.message ?? String(e)}); execute it again`), historyConsistent: true };
    }
    return this.start(input);
  }

  private runInputFor(req: ExecutionRequest): RunInput {
    const base = {
      runId: req.runId,
      attemptId: req.attemptId,
      executionProfileFingerprint: this.fingerprint,
      budget: this.options.budget,
      maxProtocolCorrections: this.options.config.maxProtocolCorrections,
      maxParallelTools: this.options.config.maxParallelTools,
      startedAt: Date.now(),
    };
    const open = this.openRun;
    if (req.kind === 'prompt') {
      if (open) throw new ExecutionBusy(this.sessionId, open.runId);
      return { ...base, runEpoch: 1, turn: this.lastTurn + 1, kind: 'prompt', messages: toMessages(req.message) };
    }
    if (!open || open.runId !== req.runId) {
      throw new ValidationError('session.execute', [{ path: ['runId'], message: `run ${req.runId} is not open in this session (nothing to ${req.kind})` }]);
    }
    if (req.kind === 'respond') {
      const pending = open.pending;
      if (!pending || pending.pendingRequest.questionId !== req.questionId) {
        throw new ValidationError('session.execute', [{ path: ['questionId'], message: `run ${req.runId} has no pending request ${req.questionId}` }]);
      }
      const pr = pending.pendingRequest;
      if (pr.kind === 'approval') parseInput(ApprovalAnswer, req.answer, 'session.execute: answer');
      else if (pr.schema) parseInput(answerSchema(pr.schema), req.answer, 'session.execute: answer');
      // whatever its schema allows, an answer is logged: it must be JSON (no BigInt, function, undefined)
      if (pr.kind !== 'approval') parseInput(JsonValue, req.answer, 'session.execute: answer');
      const resume: ResumeInput = {
        kind: 'answer',
        step: pending.step,
        batch: pending.batch,
        pendingRequest: pr,
        answer: req.answer,
        timedOut: pr.kind === 'approval' && pr.expiresAt !== undefined && Date.now() > pr.expiresAt,
      };
      return { ...base, runEpoch: open.runEpoch + 1, turn: open.turn, kind: 'respond', messages: [], resume, runFirstSeq: open.startSeq, stopRequested: open.stopAccepted, spent: spentOf(this.env, open) };
    }
    if (open.pending) {
      throw new ValidationError('session.execute', [{ path: ['kind'], message: `run ${req.runId} waits for an answer to ${open.pending.pendingRequest.questionId}: respond to it` }]);
    }
    return {
      ...base,
      runEpoch: open.runEpoch + 1,
      turn: open.turn,
      kind: 'continue',
      messages: [],
      runFirstSeq: open.startSeq,
      spent: spentOf(this.env, open),
      stopRequested: open.stopAccepted,
      ...(open.unresolvedCalls.length > 0
        ? { resume: { kind: 'recover' as const, step: open.step, batch: open.unresolvedCalls, released: open.releasedAfterIntent } }
        : { startStep: open.step, ...(open.concluded !== undefined ? { concluded: open.concluded } : {}) }),
    };
  }

  private start(input: RunInput): Promise<ExecutionResult> {
    this.claimed = undefined; // from here on the run is this.current
    this.preparing = false;
    if (this.closed) {
      this.settleIdle();
      return Promise.resolve(notRunResult(input, 'detached', 'the session was closed before the attempt started'));
    }
    if (this.detachPending) input = { ...input, detachRequested: true };
    if (this.cancelPending) input = { ...input, cancelRequested: true };
    this.detachPending = false;
    this.cancelPending = false;
    this.current = { runId: input.runId, attemptId: input.attemptId, runEpoch: input.runEpoch };
    this.env.stopAcceptedFor = undefined; // an attempt's stop is its own (a recovered one comes in its input)
    if (input.kind === 'prompt' || input.kind === 'follow_up') this.lastTurn = input.turn;
    this.cancelController = new AbortController();
    this.env.cancelSignal = this.cancelController.signal;
    // `messages` is a view: the surface array is only ever appended to (a compaction replaces it),
    // so a run's context keeps a reference and a length and copies on first read — memory grows
    // with the conversation, not with runs × history
    const prefix = this.env.prefix;
    const surface = this.env.surface.messages;
    const upTo = surface.length;
    const extra = input.messages;
    let messages: readonly Message[] | undefined;
    // the context a run *started* from: a respond or continue attempt keeps its run's entry
    if (input.kind === 'prompt' || input.kind === 'follow_up' || !this.turnContexts.has(input.runId)) this.turnContexts.set(
      input.runId,
      Object.freeze({
        runId: input.runId,
        turn: input.turn,
        modelId: this.env.model.modelId,
        ...(this.options.systemPrompt !== undefined ? { systemPrompt: this.options.systemPrompt } : {}),
        get messages() {
          return (messages ??= Object.freeze([...prefix, ...surface.slice(0, upTo), ...extra]));
        },
        tools: Object.freeze([...this.env.tools.keys()]),
        policyRevision: this.fingerprint,
      }),
    );
    this.stream.runId = input.runId;
    this.stream.attemptId = input.attemptId;
    return new Promise<ExecutionResult>((resolve) => {
      this.waiters.set(key(input.runId, input.attemptId), { runId: input.runId, attemptId: input.attemptId, resolve });
      this.actor.send({ type: 'EXECUTE', run: input });
    });
  }

  private async onRunFinished(finished: ExecutionResult): Promise<void> {
    const result: ExecutionResult = { ...finished, deliveryErrors: [...finished.deliveryErrors, ...this.hub.takeErrors({ runId: finished.runId, attemptId: finished.attemptId })] };
    this.finishing.set(key(result.runId, result.attemptId), result); // close() answers with it
    this.lastResult = result;
    this.current = undefined;
    if (['suspended', 'detached', 'fenced'].includes(result.status) || !result.checkpointCommitted) {
      try {
        this.openRun = await this.loadOpenRun();
        this.openRunStale = false;
      } catch {
        // the log could not be read back: what is open is unknown until it can be (the next
        // execute reads it again); no follow-up starts over a run that may still be open
        this.openRunStale = true;
      }
    } else {
      this.openRun = undefined;
      this.openRunStale = false;
      this.stopAcceptedRuns.delete(result.runId);
    }
    const end = this.lastRunEnd;
    this.stream.publish({ type: 'execution_finished', result }, end?.key === key(result.runId, result.attemptId) ? end.seq : undefined);
    const w = this.waiters.get(key(result.runId, result.attemptId));
    this.waiters.delete(key(result.runId, result.attemptId));
    this.finishing.delete(key(result.runId, result.attemptId));
    w?.resolve(result);
    this.settleIdle();
  }

  private async loadOpenRun(): Promise<OpenRunState | undefined> {
    const open = await loadOpenRun(this.store, this.sessionId, await this.store.getHead(this.sessionId));
    // a stop accepted while this read ran (just as its attempt ended) may not be in what it read
    if (open && this.stopAcceptedRuns.has(open.runId)) open.stopAccepted = true;
    return open;
  }

  /**
   * Starts a follow-up left waiting (accepted before a restart, or while the kill switch was set)
   * if the session is idle. Called by the runtime after opening the session and when the kill
   * switch clears.
   * @internal
   */
  resumeFollowUps(): void {
    if (!this.busy) this.startFollowUp();
  }

  /** Starts the next follow-up run when the session is free; true if one started. */
  private startFollowUp(): boolean {
    if (this.closed || this.openRun || this.openRunStale || this.isKilled() || this.actor.getSnapshot().value === 'fenced') return false;
    const f = this.inputs.takeFollowUp();
    if (!f) return false;
    this.busy = true;
    void this.start({
      runId: f.inputId,
      attemptId: f.inputId,
      runEpoch: 1,
      turn: this.lastTurn + 1,
      kind: 'follow_up',
      inputId: f.inputId,
      messages: f.messages,
      executionProfileFingerprint: this.fingerprint,
      budget: this.options.budget,
      maxProtocolCorrections: this.options.config.maxProtocolCorrections,
      maxParallelTools: this.options.config.maxParallelTools,
      startedAt: Date.now(),
    });
    return true;
  }

  private settleIdle(): void {
    this.busy = false;
    this.preparing = false;
    this.claimed = undefined;
    this.detachPending = false;
    this.cancelPending = false;
    // a follow-up accepted while this attempt ran or prepared (even one that ran nothing) starts now
    if (this.startFollowUp()) return;
    // after the attempt's own promise has settled for its caller
    setImmediate(() => {
      if (this.busy) return;
      for (const w of this.idleWaiters.splice(0)) w();
    });
  }

  /** Resolves when nothing executes and no follow-up waits to start. */
  waitForIdle(): Promise<void> {
    if (this.closed) return Promise.resolve(); // nothing runs or starts on a closed session
    if (!this.busy && !(this.inputs.hasFollowUp && !this.openRun && !this.openRunStale)) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Accepts an input durably (`input/accepted` committed before the receipt). `steer` inputs
   * join the running run before its next model call; `follow_up` inputs start a new run when the
   * current one settles (at once when idle). The same inputId again returns the same receipt.
   */
  async submitInput(envelope: InputEnvelope): Promise<InputReceipt> {
    const e = parseInput(InputEnvelope, envelope, 'session.submitInput');
    // a follow-up runs as runId = attemptId = inputId
    if (e.mode === 'follow_up') assertRunIdsFit(this.sessionId, e.inputId, e.inputId, 'session.submitInput', ['inputId', 'inputId']);
    this.assertOpen();
    const known = this.inputs.get(e.inputId);
    if (known) return this.inputs.receipt(known);
    // the same inputId submitted again while the first is being accepted: the same receipt
    const inflight = this.inflightInputs.get(e.inputId);
    if (inflight) return inflight.promise;
    if (e.mode === 'follow_up' && this.claimed === e.inputId) throw this.runIdTaken(e.inputId, 'inputId', 'session.submitInput');
    const entry = { mode: e.mode, promise: this.submitNew(e) };
    this.inflightInputs.set(e.inputId, entry);
    try {
      return await entry.promise;
    } finally {
      this.inflightInputs.delete(e.inputId);
    }
  }

  private async submitNew(e: InputEnvelope): Promise<InputReceipt> {
    await Promise.resolve(); // registered as in flight by the caller first
    const stored = await this.store.getEventById(this.sessionId, `input:${e.inputId}`);
    if (stored) {
      const again = this.inputs.get(e.inputId);
      if (again) return this.inputs.receipt(again);
      return this.settledInputReceipt(e.inputId);
    }
    if (e.mode === 'follow_up') await this.assertNewRunId(e.inputId, 'inputId', 'session.submitInput');
    const messages = toMessages(e.message);
    this.assertOpen(); // closed while the log was read
    const draft = this.env.writer.draft('input/accepted', { turn: 0, step: 0, attempt: 0 }, { inputId: e.inputId, mode: e.mode, messages }, `input:${e.inputId}`);
    await this.env.writer.appendNow([draft]);
    const queued = this.inputs.get(e.inputId) ?? { inputId: e.inputId, mode: e.mode, messages, status: 'accepted' as const };
    if (!this.inputs.get(e.inputId)) this.inputs.add(queued);
    if (e.mode === 'follow_up' && !this.busy) this.startFollowUp();
    return this.inputs.receipt(queued);
  }

  /** Withdraws an input not yet consumed (`input/cancelled`); its receipt says what became of it. */
  async cancelInput(inputId: string): Promise<InputReceipt> {
    parseInput(z.string().min(1), inputId, 'session.cancelInput');
    this.assertOpen();
    // its submitInput still being written: cancelled once it is accepted (never let through)
    const inflight = this.inflightInputs.get(inputId);
    if (inflight) await inflight.promise.catch(() => undefined);
    const q = this.inputs.get(inputId);
    if (!q) {
      // accepted by an earlier process and no longer pending: consumed or cancelled
      if (await this.store.getEventById(this.sessionId, `input:${inputId}`)) return this.settledInputReceipt(inputId);
      throw new ValidationError('session.cancelInput', [{ path: ['inputId'], message: `no input ${inputId} in this session` }]);
    }
    if (q.status === 'accepted' && this.inputs.cancel(inputId)) {
      await this.env.writer.appendNow([this.env.writer.draft('input/cancelled', { turn: 0, step: 0, attempt: 0 }, { inputId }, `input-cancelled:${inputId}`)]);
    }
    return this.inputs.receipt(q);
  }

  /** The receipt of an input in the log that is no longer pending. */
  private async settledInputReceipt(inputId: string): Promise<InputReceipt> {
    let cancelled = (await this.store.getEventById(this.sessionId, `input-cancelled:${inputId}`)) !== undefined;
    if (!cancelled) {
      // a log from before input-cancelled ids: what came first after the input, its cancel or its use
      const accepted = await this.store.getEventById(this.sessionId, `input:${inputId}`);
      if (accepted) {
        for await (const e of this.store.readEvents(this.sessionId, { fromSeq: accepted.seq + 1 })) {
          if (e.payload.inputId !== inputId) continue;
          if (e.type === 'input/cancelled') cancelled = true;
          if (e.type === 'input/cancelled' || e.type === 'user/message' || e.type === 'run/start') break;
        }
      }
    }
    return { inputId, status: cancelled ? 'cancelled' : 'consumed', durability: 'durable' };
  }

  /** A run id names one run: refused if a run (or a follow-up waiting to start) already has it. */
  private async assertNewRunId(runId: string, field: string, where: string): Promise<void> {
    const queued = this.inputs.get(runId);
    const head = this.openRun ? undefined : await this.store.getHead(this.sessionId);
    const taken =
      (queued?.mode === 'follow_up' && queued.status === 'accepted') ||
      this.current?.runId === runId ||
      (field === 'inputId' && this.claimed === runId) ||
      this.openRun?.runId === runId ||
      head?.lastSettledRun?.runId === runId || // also in logs from before run-open ids
      (await this.store.getEventById(this.sessionId, runOpenEventId(runId))) !== undefined;
    if (taken) throw this.runIdTaken(runId, field, where);
  }

  /**
   * Cancels the running attempt: the model call is aborted, running tools are signalled, and
   * the run ends `cancelled` once they settle. Resolves true if an attempt was running.
   */
  async requestCancel(reason = 'requestCancel'): Promise<boolean> {
    const target = this.current;
    if (this.closed) return false;
    if (!target) {
      // an execute still preparing its attempt: that attempt starts cancelled (as requestDetach);
      // not one whose attempt has ended (its result still being settled)
      if (!this.preparing) return false;
      this.cancelPending = true;
      return true;
    }
    const controller = this.cancelController;
    const at = { turn: 0, step: 0, attempt: target.runEpoch };
    await this.env.writer.appendNow([this.env.writer.draft('cancellation/requested', at, { reason })]).catch(() => undefined);
    // the attempt may have ended while the request was written: never cancel the one after it
    if (this.current !== target) return false;
    this.actor.send({ type: 'CANCEL' });
    controller.abort(new Error(reason));
    return true;
  }

  /** Stops driving the run at its next safe point (after the current step), leaving it resumable. */
  requestDetach(): boolean {
    if (this.closed || !this.busy) return false;
    if (!this.current) {
      if (!this.preparing) return false; // the attempt has ended: nothing to detach
      this.detachPending = true;
    }
    else this.actor.send({ type: 'DETACH' });
    return true;
  }

  /**
   * DESIGN §4 item 10: accepted only for this session, this instance, the running interaction and
   * its run epoch; durable (`steering/accepted`) before the receipt is returned.
   */
  async stopAfterCurrentToolRound(request: StopRequest): Promise<StopReceipt> {
    const req = parseInput(StopRequest, request, 'session.stopAfterCurrentToolRound');
    this.assertOpen();
    const canonical = canonicalJson(req);
    // the same key again while the first is being written (a client's retry): the same answer
    const inflight = this.inflightStops.get(req.idempotencyKey);
    if (inflight) {
      if (inflight.request !== canonical) throw new SessionSteeringConflict('idempotencyKey', `idempotency key ${req.idempotencyKey} was used for a different request`);
      return inflight.promise;
    }
    const promise = this.acceptStop(req, canonical);
    this.inflightStops.set(req.idempotencyKey, { request: canonical, promise });
    try {
      return await promise;
    } finally {
      this.inflightStops.delete(req.idempotencyKey);
    }
  }

  private readonly inflightStops = new Map<string, { request: string; promise: Promise<StopReceipt> }>();

  private async acceptStop(req: StopRequest, canonical: string): Promise<StopReceipt> {
    const seen = this.steering.get(req.idempotencyKey);
    if (seen) {
      if (seen.request !== canonical) throw new SessionSteeringConflict('idempotencyKey', `idempotency key ${req.idempotencyKey} was used for a different request`);
      return seen.receipt;
    }
    const stored = await this.store.getEventById(this.sessionId, `steer:${req.idempotencyKey}`);
    if (stored) {
      if (canonicalJson(stored.payload.request) !== canonical) throw new SessionSteeringConflict('idempotencyKey', `idempotency key ${req.idempotencyKey} was used for a different request`);
      return stored.payload.receipt as StopReceipt;
    }
    if (req.sessionId !== this.sessionId) throw new SessionSteeringConflict('sessionId', `request names session ${req.sessionId}, this is ${this.sessionId}`);
    if (req.sessionInstanceId !== this.sessionInstanceId) {
      throw new SessionSteeringConflict('sessionInstanceId', `request names session instance ${req.sessionInstanceId}, the current one is ${this.sessionInstanceId}`);
    }
    const cur = this.current;
    if (!cur || cur.runId !== req.interactionId) {
      throw new SessionSteeringConflict('interactionId', `interaction ${req.interactionId} is not running (running: ${cur?.runId ?? 'none'})`);
    }
    if (cur.runEpoch !== req.expectedRunEpoch) {
      throw new SessionSteeringConflict('expectedRunEpoch', `run ${cur.runId} is at epoch ${cur.runEpoch}, not ${req.expectedRunEpoch}`);
    }
    const receipt: StopReceipt = { schemaVersion: 1, request: req, executionProfileFingerprint: this.fingerprint };
    const draft = this.env.writer.draft('steering/accepted', { turn: 0, step: 0, attempt: cur.runEpoch }, { request: req, receipt }, `steer:${req.idempotencyKey}`);
    await this.env.writer.appendNow([draft]);
    this.steering.set(req.idempotencyKey, { request: canonical, receipt });
    // the run may have ended while the request was written: never stop the one after it
    if (this.current === cur) {
      this.env.stopAcceptedFor = cur.runId;
      this.actor.send({ type: 'STOP_AFTER_ROUND' });
    } else {
      // the attempt ended while the request was written: if its run is still open (suspended,
      // detached), the run's next attempt honours the stop, as one in a new process would
      this.stopAcceptedRuns.add(cur.runId);
      if (this.openRun?.runId === cur.runId) this.openRun.stopAccepted = true;
    }
    return receipt;
  }

  /**
   * Releases resource locks held by uncertain calls (`resources/released`), once the app has
   * checked what really happened.
   */
  async releaseResources(keys: string[]): Promise<void> {
    const k = parseInput(z.array(z.string().min(1)).min(1), keys, 'session.releaseResources');
    this.assertOpen();
    await this.env.writer.appendNow([this.env.writer.draft('resources/released', { turn: 0, step: 0, attempt: 0 }, { keys: k })]);
    // an interrupted call that continue will record uncertain does not take them again
    const open = this.openRun;
    if (open) for (const c of open.unresolvedCalls) releaseFor(open, c, k);
  }

  /** Resource keys currently locked by uncertain calls. */
  get activeResourceLocks(): string[] {
    return [...this.env.heldLocks];
  }

  /** Persists app JSON with the session (`state/updated`). */
  async setStateContext(value: unknown): Promise<void> {
    const v = parseInput(JsonValue, value, 'session.setStateContext');
    this.assertOpen();
    await this.env.writer.appendNow([this.env.writer.draft('state/updated', { turn: 0, step: 0, attempt: 0 }, { stateContext: v })]);
    this.state = v;
  }

  /**
   * While idle: installs `messages` as a new surface base (a `checkpoint/loaded` epoch event) and,
   * if given, the stateContext.
   */
  async loadCheckpoint(checkpoint: { messages: Message[]; stateContext?: unknown }): Promise<void> {
    const c = parseInput(Checkpoint, checkpoint, 'session.loadCheckpoint');
    this.assertOpen();
    if (this.busy) throw new ExecutionBusy(this.sessionId, this.current?.runId ?? 'unknown');
    if (this.openRun) throw new ExecutionBusy(this.sessionId, this.openRun.runId);
    await this.env.writer.appendNow([this.env.writer.draft('checkpoint/loaded', { turn: 0, step: 0, attempt: 0 }, c)]);
    if (c.stateContext !== undefined) this.state = c.stateContext;
    this.refreshView();
  }

  /** The result recorded for this attempt, if it ran before (nothing runs again). */
  /**
   * DESIGN §6: an attempt already recorded returns its result; an interrupted one returns the
   * run's settled result if the run has settled since (through a later attempt), else an
   * incomplete result naming the interruption.
   */
  private async recordedResult(runId: string, attemptId: string): Promise<ExecutionResult | undefined> {
    const end = await this.store.getEventById(this.sessionId, runEndEventId(runId, attemptId));
    if (end) return end.payload.result as ExecutionResult;
    let start = await this.store.getEventById(this.sessionId, runStartEventId(runId, attemptId));
    if (!start) {
      const opened = await this.store.getEventById(this.sessionId, runOpenEventId(runId));
      if (opened?.payload.attemptId === attemptId) start = opened;
    }
    if (!start) return undefined;
    if (this.openRun?.runId !== runId) {
      // the run is not open any more: the attempt that settled it comes after this one
      for await (const e of this.store.readEvents(this.sessionId, { fromSeq: start.seq })) {
        if (e.type === 'run/end' && e.payload.runId === runId && !UNSETTLED_END_STATUSES.has(String(e.payload.status))) return e.payload.result as ExecutionResult;
      }
    }
    return notRunResult({ runId, attemptId }, 'detached', `attempt ${attemptId} of run ${runId} was interrupted before it settled; continue the run with a new attempt`);
  }

  /** JSON state for UIs and debugging. */
  snapshot(): SessionSnapshot {
    const snap = this.actor.getSnapshot();
    const run = snap.children.run?.getSnapshot() as { value: unknown; context: { step: number; toolCalls: number; cost: string; recoveries: number } } | undefined;
    const r = this.lastResult;
    // while an attempt runs (a respond or continue included) the session is executing, not
    // waiting on the request that attempt is answering
    const waiting = this.current ? undefined : this.openRun;
    const status = waiting?.pending ? 'suspended' : waiting ? 'detached' : String(snap.value);
    return {
      sessionId: this.sessionId,
      status,
      phase: run ? String(run.value) : status,
      messages: [...this.env.surface.messages],
      step: run?.context.step ?? r?.steps ?? 0,
      toolCalls: run?.context.toolCalls ?? r?.toolCalls ?? 0,
      tokens: this.env.prefixTokens + this.env.surface.tokens,
      cost: run?.context.cost ?? r?.cost ?? '0',
      recoveries: run?.context.recoveries ?? r?.recoveries ?? 0,
      ...(r ? { usage: r.usage } : {}),
      ...(waiting?.pending ? { pending: waiting.pending.pendingRequest } : {}),
      ...(r?.error ? { lastError: { kind: r.error.kind, message: r.error.message } } : {}),
    };
  }

  /** An `@xstate/store` store holding `snapshot()`, kept current from the session's envelopes. */
  get view(): ReturnType<typeof makeView> {
    if (!this.viewStore) {
      this.viewStore = makeView(this.snapshot());
      this.stream.events$.subscribe(() => this.refreshView());
    }
    return this.viewStore;
  }

  private refreshView(): void {
    this.viewStore?.trigger.sync({ snapshot: this.snapshot() });
  }

  /** Applies committed records to the in-memory views (surface, resource locks) and announces the model's messages. */
  onCommitted(records: readonly EventRecord[]): void {
    this.env.surface.apply(records);
    for (const r of records) {
      if (r.type === 'tool/call') {
        this.env.callSeqs.set(r.payload.callId as string, r.seq);
      } else if (r.type === 'tool/result' && r.payload.copiedFrom === undefined) {
        this.env.callSeqs.delete(r.payload.callId as string);
        const o = r.payload.outcome as ToolOutcome;
        if (o.kind === 'uncertain-hanging' || (o.kind === 'cancelled' && !o.settled)) for (const k of o.resourceLocks) this.env.heldLocks.add(k);
        if (o.kind === 'completed') for (const k of o.releaseResources) this.env.heldLocks.delete(k);
      } else if (r.type === 'resources/released') {
        for (const k of r.payload.keys as string[]) this.env.heldLocks.delete(k);
      } else if (r.type === 'run/end') {
        this.lastRunEnd = { key: key(r.payload.runId as string, r.payload.attemptId as string), seq: r.seq };
      } else if (r.type === 'assistant/message' && r.payload.copiedFrom === undefined) {
        // a subscriber sees the model's whole message once it is in the log, never before
        this.env.emit({ type: 'message_end', role: 'assistant', message: r.payload.message as Message }, r.seq);
      }
    }
  }

  /**
   * Stops the session actor. A run in progress is abandoned where it stands (resumable). Resolves
   * once required subscribers have the envelopes queued for them; a second call shares the first's.
   */
  close(): Promise<void> {
    return (this.closing ??= this.closeOnce());
  }

  private async closeOnce(): Promise<void> {
    this.closed = true;
    this.env.writer.close(new StoreClosedError(`session ${this.sessionId}`));
    this.cancelController.abort(new Error('session closed'));
    this.actor.send({ type: 'CLOSE' });
    this.actor.stop();
    // the stopped run never reports back: its execute still gets a result (DESIGN §6) — the one
    // the log holds if its closing commit was already under way and landed, else `detached`
    if (this.waiters.size > 0) await settledWithin(this.env.writer.settled(), CLOSE_COMMIT_WAIT_MS);
    for (const [k, w] of this.waiters) {
      const finished = this.finishing.get(k) ?? (await this.recordedResult(w.runId, w.attemptId).catch(() => undefined)); // ended and recorded: its real result
      if (finished) w.resolve(finished);
      else w.resolve(notRunResult(w, 'detached', `the session was closed while attempt ${w.attemptId} of run ${w.runId} ran; the run is left resumable: continue it with a new attempt`));
    }
    this.waiters.clear();
    this.stream.complete();
    // a required subscriber gets every envelope (DESIGN §6): what is queued for it is delivered
    // before the hub drops its subscribers
    await this.hub.whenRequiredDrained();
    this.hub.close();
    for (const w of this.idleWaiters.splice(0)) w();
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreClosedError(`session ${this.sessionId}`);
  }
}

/** How long close() waits for a commit already under way, to answer its execute with what the log holds. */
const CLOSE_COMMIT_WAIT_MS = 2000;

/** Resolves when `p` settles or after `ms`, whichever is first. */
function settledWithin(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p.then(() => undefined, () => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]).finally(() => clearTimeout(timer));
}

function makeView(initial: SessionSnapshot) {
  return createStore({
    context: initial,
    on: { sync: (_ctx: SessionSnapshot, e: { snapshot: SessionSnapshot }) => e.snapshot },
  });
}
