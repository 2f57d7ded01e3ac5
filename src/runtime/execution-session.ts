import type { Observable } from 'rxjs';
import { createActor, fromPromise, type Actor } from 'xstate';
import type { SessionContext, SettleOutput } from '../machines/session.machine.js';
import { z } from 'zod';
import { ExecutionBusy, isExecutionBusy, isStoreClosedError, isValidationError, StoreClosedError, ValidationError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import {
  ExecutionRequest,
  InputEnvelope,
  notRunResult,
  StopRequest,

  type ExecutionResult,
  type InputReceipt,
  type RecoveryOutcome,
  type StopReceipt,
} from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import type { RunInput } from '../machines/run.machine.js';
import type { EventStore } from '../persistence/event-store.js';
import { releaseFor, type OpenRunState } from '../persistence/open-run.js';
import { loadOpenRun, settleInterruptedFinal, spentOf } from './recovery-outcome.js';
import type { Envelope, EnvelopeStream } from '../streams/envelopes.js';
import { SubscriberHub, type SubscribeOptions, type SubscriberListener, type Unsubscribe } from '../streams/subscribers.js';
import { sessionMachineFor } from './session-actors.js';
import type { SessionServices } from '../actors/session-services.js';
import { assertRunIdsFit, runOpenEventId } from '../persistence/run-ids.js';
import type { ResolvedRuntimeOptions } from './options.js';
import { InputQueue, type QueuedInput } from './input-queue.js';
import { InputDesk } from './input-desk.js';
import { Checkpoint, JsonValue } from './answer-schema.js';
import { attemptInput } from './attempt-input.js';
import { StopRequests } from './stop-requests.js';
import { recordedResult } from './log-lookups.js';
import { makeView, type SessionSnapshot } from './session-view.js';

export type { SessionSnapshot } from './session-view.js';

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

/** What `openSession` hands a new ExecutionSession. */
export interface SessionDeps {
  sessionId: string;
  sessionInstanceId: string;
  writerEpoch: number;
  lastTurn: number;
  env: SessionServices;
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

const key = (runId: string, attemptId: string) => `${runId}\u0000${attemptId}`;
const sameAttempt = (a: SessionContext['current'], b: SessionContext['current']) => a !== undefined && b !== undefined && a.runId === b.runId && a.attemptId === b.attemptId;

/**
 * One open session: the durable conversation's live writer (DESIGN §6). Made by
 * `runtime.openSession`.
 * @example
 * const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })
 */
export class ExecutionSession {
  readonly sessionId: string;
  readonly sessionInstanceId: string;
  readonly actor: Actor<ReturnType<typeof sessionMachineFor>>;
  readonly turnContexts = new Map<string, TurnContext>();
  /** What opening the session found in the log (DESIGN §5). */
  readonly recovery: RecoveryOutcome;
  private readonly env: SessionServices;
  private readonly store: EventStore;
  private readonly options: ResolvedRuntimeOptions;
  private readonly stream: EnvelopeStream;
  private readonly fingerprint: string;
  private readonly isKilled: () => boolean;
  private readonly inputs: InputQueue;
  private readonly desk: InputDesk;
  private readonly stops: StopRequests;
  private readonly waiters = new Map<string, { runId: string; attemptId: string; resolve: (r: ExecutionResult) => void }>();
  /** Results of attempts that ended, while the session state is brought up to date. */
  private readonly finishing = new Map<string, ExecutionResult>();
  /** Inputs being accepted (registered before any await). */

  private runIdTaken(runId: string, field: string, where: string): ValidationError {
    return new ValidationError(where, [{ path: [field], message: `run ${runId} already exists or is being started in session ${this.sessionId}: a new run needs a new id (continue or respond to resume that run)` }]);
  }
  private idleWaiters: (() => void)[] = [];
  private lastTurn: number;
  private lastResult?: ExecutionResult;
  private openRun?: OpenRunState;
  /** The open run could not be read back after an attempt: read it again before the next one. */
  private openRunStale = false;
  /** Runs with a stop accepted after their attempt ended (still open): their next attempt stops. */
  private readonly stopAcceptedRuns = new Set<string>();
  private state: unknown;
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
    this.desk = new InputDesk(d.sessionId, d.store, d.env.writer, this.inputs);
    this.stops = new StopRequests(d.sessionId, d.sessionInstanceId, d.fingerprint, d.store, d.env.writer);
    this.recovery = d.recovery;
    if (d.openRun) this.openRun = d.openRun;
    this.env.takeSteers = () => this.inputs.takeSteers().map((i) => ({ inputId: i.inputId, messages: i.messages }));
    this.hub.attach(this.stream.events$);
    this.env.backpressure = () => this.hub.whenWritable();
    const machine = sessionMachineFor(d.env).provide({
      actors: {
        settleAttempt: fromPromise<SettleOutput, { result: ExecutionResult }>(({ input }) => this.settleAttempt(input.result)),
        closeSession: fromPromise<void, void>(() => this.closeWork()),
      },
    });
    const openRun = d.openRun ? (d.openRun.pending ? ('suspended' as const) : ('detached' as const)) : undefined;
    this.actor = createActor(machine, {
      input: { sessionId: d.sessionId, sessionInstanceId: d.sessionInstanceId, writerEpoch: d.writerEpoch, ...(openRun ? { openRun } : {}) },
      clock: d.env.clock,
      ...(d.options.inspect ? { inspect: d.options.inspect } : {}),
    });
    this.actor.on('session.rested', ({ result }) => this.rested(result));
    this.actor.start();
  }

  /** The session machine's state: what the session is doing. */
  private get phase(): string {
    return String(this.actor.getSnapshot().value);
  }

  /** An attempt is being prepared, runs or is being settled. */
  private get busy(): boolean {
    const p = this.phase;
    return p === 'preparing' || p === 'executing' || p === 'finalizing';
  }

  /** The attempt under way, from its start until it is settled. */
  private get current(): SessionContext['current'] {
    return this.actor.getSnapshot().context.current;
  }

  private get closed(): boolean {
    const p = this.phase;
    return p === 'closing' || p === 'closed';
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
      const recorded = cur?.runId === req.runId && cur.attemptId === req.attemptId ? undefined : await recordedResult(this.store, this.sessionId, req.runId, req.attemptId, this.openRun?.runId).catch(() => undefined);
      if (recorded) return recorded;
      throw new ExecutionBusy(this.sessionId, this.current?.runId ?? 'unknown');
    }
    if (req.kind === 'prompt' && this.desk.submitting(req.runId) === 'follow_up') throw this.runIdTaken(req.runId, 'runId', 'session.execute');
    // claimed synchronously, before any await: a prompt and a follow-up racing for one id cannot both pass their checks
    this.actor.send({ type: 'PREPARE', ...(req.kind === 'prompt' ? { claimedRunId: req.runId } : {}) });
    let input: RunInput;
    try {
      const recorded = await recordedResult(this.store, this.sessionId, req.runId, req.attemptId, this.openRun?.runId);
      if (recorded) {
        this.abandon();
        return recorded;
      }
      // a run is one interaction: its id names its results, deliveries and final message ids
      if (req.kind === 'prompt') await this.assertNewRunId(req.runId, 'runId', 'session.execute');
      if (this.closed) {
        this.abandon();
        return notRunResult(req, 'detached', 'the session was closed before the attempt started');
      }
      if (this.env.writer.fenced) {
        this.abandon();
        return notRunResult(req, 'fenced', 'this session instance was fenced: another writer attached to the session; open it again');
      }
      if (this.isKilled()) {
        this.abandon();
        return notRunResult(req, 'cancelled', 'the kill switch is set: no new attempt starts');
      }
      // read back first: the open run's committed final may be what the last read missed
      if (this.openRunStale) {
        this.openRun = await this.loadOpenRun();
        this.openRunStale = false;
      }
      // a final committed by an attempt whose closing commit failed: settled as after a restart
      // (DESIGN §5: redelivered to an idempotent owner, else delivery/unknown), never a new answer
      const open = this.openRun;
      if (req.kind === 'continue' && open?.runId === req.runId && open.undeliveredFinals.length > 0) {
        let settled: OpenRunState | undefined;
        try {
          settled = await settleInterruptedFinal(this.env, { ...open, attemptId: req.attemptId });
        } catch (e) {
          this.abandon();
          if (this.closed || isStoreClosedError(e)) return notRunResult(req, 'detached', 'the session was closed before the attempt started');
          return { ...notRunResult(req, 'failed', `settling the run's committed final failed: ${(e as Error)?.message ?? e}; continue it again`), historyConsistent: true };
        }
        if (settled === undefined) {
          this.openRun = undefined;
          const result = (await recordedResult(this.store, this.sessionId, req.runId, req.attemptId, undefined)) ?? notRunResult(req, 'failed', 'the interrupted final was settled but its run/end cannot be read back');
          this.lastResult = result;
          this.abandon();
          return result;
        }
      }
      input = attemptInput(req, {
        sessionId: this.sessionId,
        fingerprint: this.fingerprint,
        options: this.options,
        now: this.env.clock.now(),
        openRun: this.openRun,
        lastTurn: this.lastTurn,
        spentOf: (open) => spentOf(this.env, open),
      });
    } catch (e) {
      this.abandon();
      // closed (or its store closed) while the attempt was still being prepared: not an input error
      if (this.closed || isStoreClosedError(e)) return notRunResult(req, 'detached', 'the session was closed before the attempt started');
      if (isValidationError(e) || isExecutionBusy(e)) throw e;
      // the log could not be read (a store error): nothing started, nothing was written — a
      // result, not a rejection (DESIGN §6); the same request can be executed again
      return { ...notRunResult(req, 'failed', `the attempt did not start: reading the session's log failed (${(e as Error)?.message ?? String(e)}); execute it again`), historyConsistent: true };
    }
    return this.start(input);
  }

  private start(input: RunInput): Promise<ExecutionResult> {
    if (this.closed) return Promise.resolve(notRunResult(input, 'detached', 'the session was closed before the attempt started'));
    if (input.kind === 'prompt' || input.kind === 'follow_up') this.lastTurn = input.turn;
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
      this.actor.send({ type: 'START', run: input });
    });
  }

  /**
   * The session machine's `settleAttempt` actor: the attempt's result gets its delivery errors, the
   * open run is read back when the run may still be open, `execution_finished` goes out; says where
   * the session rests now. The attempt's caller is answered once the machine rests (rested()).
   */
  private async settleAttempt(finished: ExecutionResult): Promise<SettleOutput> {
    const result: ExecutionResult = { ...finished, deliveryErrors: [...finished.deliveryErrors, ...this.hub.takeErrors({ runId: finished.runId, attemptId: finished.attemptId })] };
    this.finishing.set(key(result.runId, result.attemptId), result); // close() answers with it
    this.lastResult = result;
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
    const end = this.env.writer.projection.lastRunEnd;
    this.stream.publish({ type: 'execution_finished', result }, end?.runId === result.runId && end.attemptId === result.attemptId ? end.seq : undefined);
    if (result.status === 'fenced') return { rest: 'fenced' };
    const open = this.openRun;
    return { rest: open?.pending ? 'suspended' : open || this.openRunStale ? 'detached' : 'idle' };
  }

  /** The machine rests: the settled attempt's caller gets its result, then a waiting follow-up starts. */
  private rested(result: ExecutionResult | undefined): void {
    if (result) {
      const k = key(result.runId, result.attemptId);
      const w = this.waiters.get(k);
      // the settled result (with its delivery errors), as settleAttempt recorded it
      const settled = this.finishing.get(k) ?? result;
      this.waiters.delete(k);
      this.finishing.delete(k);
      w?.resolve(settled);
    }
    this.afterRest();
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
    if (!this.busy && !this.closed) this.startFollowUp();
  }

  /** Starts the next follow-up run when the session is free; true if one started. */
  private startFollowUp(): boolean {
    if (this.closed || this.openRun || this.openRunStale || this.isKilled() || this.phase === 'fenced') return false;
    const f = this.inputs.takeFollowUp();
    if (!f) return false;
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
      startedAt: this.env.clock.now(),
    });
    return true;
  }

  /** The attempt being prepared runs nothing: the session rests again (rested() follows). */
  private abandon(): void {
    if (this.phase === 'preparing') this.actor.send({ type: 'ABANDON' });
  }

  private afterRest(): void {
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
    if (e.mode === 'follow_up' && this.inputs.get(e.inputId) === undefined && this.desk.submitting(e.inputId) === undefined && this.actor.getSnapshot().context.claimedRunId === e.inputId) {
      throw this.runIdTaken(e.inputId, 'inputId', 'session.submitInput');
    }
    return this.desk.submit(e, {
      checkNewRun: (inputId) => this.assertNewRunId(inputId, 'inputId', 'session.submitInput'),
      assertOpen: () => this.assertOpen(),
      accepted: (mode) => {
        if (mode === 'follow_up' && !this.busy) this.startFollowUp();
      },
    });
  }

  /** Withdraws an input not yet consumed (`input/cancelled`); its receipt says what became of it. */
  async cancelInput(inputId: string): Promise<InputReceipt> {
    parseInput(z.string().min(1), inputId, 'session.cancelInput');
    this.assertOpen();
    return this.desk.cancel(inputId);
  }

  /** A run id names one run: refused if a run (or a follow-up waiting to start) already has it. */
  private async assertNewRunId(runId: string, field: string, where: string): Promise<void> {
    const queued = this.inputs.get(runId);
    const head = this.openRun ? undefined : await this.store.getHead(this.sessionId);
    const taken =
      (queued?.mode === 'follow_up' && queued.status === 'accepted') ||
      this.current?.runId === runId ||
      (field === 'inputId' && this.actor.getSnapshot().context.claimedRunId === runId) ||
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
      if (this.phase !== 'preparing') return false;
      this.actor.send({ type: 'CANCEL', reason });
      return true;
    }
    if (this.phase !== 'executing') return false; // ended: its result is being settled
    const at = { turn: 0, step: 0, attempt: target.runEpoch };
    await this.env.writer.appendNow([this.env.writer.draft('cancellation/requested', at, { reason })]).catch(() => undefined);
    // the attempt may have ended while the request was written: never cancel the one after it
    if (!sameAttempt(this.current, target) || this.phase !== 'executing') return false;
    this.actor.send({ type: 'CANCEL', reason });
    return true;
  }

  /** Stops driving the run at its next safe point (after the current step), leaving it resumable. */
  requestDetach(): boolean {
    // preparing: the attempt starts detached; executing: the run detaches at its next safe point;
    // an attempt that has ended (being settled) has nothing to detach
    if (this.phase !== 'preparing' && this.phase !== 'executing') return false;
    this.actor.send({ type: 'DETACH' });
    return true;
  }

  /**
   * DESIGN §4 item 10: accepted only for this session, this instance, the running interaction and
   * its run epoch; durable (`steering/accepted`) before the receipt is returned.
   */
  async stopAfterCurrentToolRound(request: StopRequest): Promise<StopReceipt> {
    const req = parseInput(StopRequest, request, 'session.stopAfterCurrentToolRound');
    this.assertOpen();
    return this.stops.request(req, {
      current: () => this.current,
      // the run may have ended while the request was written: never stop the one after it
      accepted: (cur) => {
        if (sameAttempt(this.current, cur) && this.phase === 'executing') this.actor.send({ type: 'STOP_AFTER_ROUND' });
        else {
          // the attempt ended while the request was written: if its run is still open (suspended,
          // detached), the run's next attempt honours the stop, as one in a new process would
          this.stopAcceptedRuns.add(cur.runId);
          if (this.openRun?.runId === cur.runId) this.openRun.stopAccepted = true;
        }
      },
    });
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

  /**
   * Stops the session actor. A run in progress is abandoned where it stands (resumable). Resolves
   * once required subscribers have the envelopes queued for them; a second call shares the first's.
   */
  close(): Promise<void> {
    return (this.closing ??= this.closeOnce());
  }

  private closeOnce(): Promise<void> {
    this.env.writer.close(new StoreClosedError(`session ${this.sessionId}`));
    return new Promise<void>((resolve) => {
      this.closeDone = resolve;
      // closing stops the run under way (its actors' signals abort); closeSession does the rest
      this.actor.send({ type: 'CLOSE' });
    });
  }

  private closeDone: () => void = () => {};

  /** The session machine's `closeSession` actor. */
  private async closeWork(): Promise<void> {
    try {
      await this.closeAnswering();
    } finally {
      this.closeDone();
    }
  }

  private async closeAnswering(): Promise<void> {
    // the stopped run never reports back: its execute still gets a result (DESIGN §6) — the one
    // the log holds if its closing commit was already under way and landed, else `detached`
    if (this.waiters.size > 0) await settledWithin(this.env.writer.settled(), CLOSE_COMMIT_WAIT_MS);
    for (const [k, w] of this.waiters) {
      const finished = this.finishing.get(k) ?? (await recordedResult(this.store, this.sessionId, w.runId, w.attemptId, this.openRun?.runId).catch(() => undefined)); // ended and recorded: its real result
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
