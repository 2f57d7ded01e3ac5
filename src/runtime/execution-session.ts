import type { OfferedTools } from '../actors/session-services.js';
import { newRunId } from '../contracts/clock.js';
import type { Observable } from 'rxjs';
import { waitFor } from 'xstate';
import { z } from 'zod';
import { ExecutionBusy, StoreClosedError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import {
  ExecutionRequest,
  InputEnvelope,
  notRunResult,
  ResourceKeys,
  RunRequest,
  StopRequest,
  type ExecutionResult,
  type IdentifiedRequest,
  type InputReceipt,
  type RecoveryOutcome,
  type StopReceipt,
} from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import type { SessionServices } from '../actors/session-services.js';
import type { PrepareInput, PrepareOutput, SessionContext } from '../machines/session.machine.js';
import { assertRunIdsFit } from '../persistence/run-ids.js';
import type { Envelope, EnvelopeStream } from '../streams/envelopes.js';
import type { SubscribeOptions, SubscriberListener, Unsubscribe } from '../streams/subscribers.js';
import { Checkpoint, JsonValue } from './answer-schema.js';
import type { SessionDeps } from './session-deps.js';
import { recordedOrUnread } from './log-lookups.js';
import { assertModel, type ResolvedRuntimeOptions } from './options.js';
import { prepareAttempt } from './prepare-attempt.js';
import { runIdTaken } from './run-claims.js';
import { wireSession, type SessionParts } from './session-wiring.js';
import type { OpenRunTracker } from './open-run-tracker.js';
import { assertRunRequest, identifiedRequest, identifiedRun, runHandle, type RunHandle } from './run-handle.js';
import { withRunOptions, type RunOptions, type TypedResult } from './run-options.js';
import { createSessionActor } from './session-actors.js';
import { heldBy, LiveView, snapshotOf, type SessionSnapshot } from './session-view.js';
import type { TurnContext } from './turn-context.js';
import type { ApprovalReceipt } from './per-call-approvals.js';
import { sessionExtras, type SessionExtras } from './session-extras.js';

export type { SessionSnapshot, SessionStatus } from './session-view.js';
export type { TurnContext } from './turn-context.js';
export type { SessionDeps } from './session-deps.js';

/**
 * One open session: the durable conversation's live writer (DESIGN §6). Made by
 * `runtime.openSession`.
 * @example
 * const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })
 */
export class ExecutionSession<TOut = unknown> {
  readonly sessionId: string;
  readonly sessionInstanceId: string;
  readonly actor: ReturnType<typeof createSessionActor>;
  readonly turnContexts: Map<string, TurnContext>;
  /** What opening the session found in the log (DESIGN §5). */
  readonly recovery: RecoveryOutcome;
  private readonly env: SessionServices;
  private readonly options: ResolvedRuntimeOptions;
  private readonly stream: EnvelopeStream;
  /** What `openSession` handed the session. */
  private readonly deps: SessionDeps;
  private readonly parts: SessionParts;
  private readonly runs: OpenRunTracker;
  private lastResult?: ExecutionResult;
  private readonly extras: SessionExtras;
  private readonly liveView = new LiveView(
    () => this.snapshot(),
    () => this.stream.events$,
  );

  constructor(d: SessionDeps) {
    this.sessionId = d.sessionId;
    this.sessionInstanceId = d.sessionInstanceId;
    this.env = d.env;
    this.options = d.options;
    this.stream = d.stream;
    this.deps = d;
    this.recovery = d.recovery;
    this.parts = wireSession(d, {
      settled: (r) => {
        this.lastResult = r;
        this.extras.resuming.settled(r);
      },
      prepare: (i) => this.prepare(i),
      rested: (result) => this.rested(result),
    });
    this.runs = this.parts.runs;
    this.extras = sessionExtras(d, this.parts, {
      busy: () => this.busy,
      closed: () => this.closed,
      fenced: () => this.phase === 'fenced',
      execute: (r) => this.execute(r),
      run: (r) => this.run(r),
      assertOpen: () => this.assertOpen(),
      newId: () => this.newId(),
    });
    this.actor = this.parts.actor;
    this.turnContexts = this.parts.starts.turnContexts;
    this.actor.start();
  }

  /** @internal The tools of the attempt begun last (undefined before the first): what its tracer's tool spans read. */
  get attemptTools(): OfferedTools | undefined {
    return this.parts.starts.latest?.offered;
  }

  private get phase(): string {
    return String(this.actor.getSnapshot().value);
  }

  /** An attempt is being prepared, runs or is being settled. */
  private get busy(): boolean {
    const p = this.phase;
    return p === 'preparing' || p === 'executing' || p === 'finalizing';
  }

  /** The result recorded for the request's attempt, if any (recordedOrUnread). */
  private readonly recordedFor = (req: IdentifiedRequest, unread?: 'failed') =>
    recordedOrUnread(this.deps.store, this.sessionId, this.runs.open?.runId, req, unread);

  /** The attempt under way, from its start until it is settled. */
  private get current(): SessionContext['current'] {
    return this.actor.getSnapshot().context.current;
  }

  /** The run that makes the session busy: the one running, or the one whose attempt is being prepared. */
  private get busyRunId(): string {
    const { current, preparing } = this.actor.getSnapshot().context;
    return current?.runId ?? this.parts.callers.runIdOf(preparing) ?? 'unknown';
  }

  private get closed(): boolean {
    const p = this.phase;
    return p === 'closing' || p === 'closed';
  }

  /** Every envelope of this session, live (RxJS, unbounded: see `subscribe`). */
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
    return this.deps.hub.subscribe(listener, options);
  }

  /** App JSON persisted with the session (`setStateContext` writes it). */
  get stateContext(): unknown {
    return this.parts.records.stateContext;
  }

  /** What the open (unsettled) run is waiting for, if anything. */
  get pendingRequest() {
    return this.runs.asked;
  }

  /**
   * Runs one attempt. Rejects only for bad input (ValidationError) or a busy session
   * (ExecutionBusy); everything that happens while running comes back as the result.
   */
  execute<S extends z.ZodType>(request: ExecutionRequest & { output: S }): Promise<TypedResult<z.output<S>>>;
  execute(request: ExecutionRequest): Promise<TypedResult<TOut>>;
  async execute(request: ExecutionRequest): Promise<ExecutionResult> {
    const parsed = parseInput(ExecutionRequest, request, 'session.execute');
    // (no await when the request names its ids: a prompt claims its run id before any await)
    if (parsed.runId === undefined && this.runs.stale && !this.busy) await this.runs.reload().catch(() => undefined);
    const req =
      parsed.runId !== undefined && parsed.attemptId !== undefined
        ? (parsed as IdentifiedRequest)
        : identifiedRequest(parsed, this.runs.open?.runId ?? this.current?.runId, () => this.newId(), this.sessionId);
    assertRunIdsFit(this.sessionId, req.runId, req.attemptId, 'session.execute', ['runId', 'attemptId']);
    this.assertOpen();
    assertModel(this.options, 'session.execute');
    // resume by default: an interrupted run is continued first (and the inputs it held back run), then this prompt
    const resumed = req.kind === 'prompt' && !this.busy && this.extras.resuming.needed;
    const known = resumed ? await this.extras.resuming.beforePrompt(() => this.recordedFor(req, 'failed')) : undefined;
    if (known) return known;
    if (this.busy) {
      // an attempt being settled (execution_finished out, not resting yet): this one starts once the session rests
      if (this.phase === 'finalizing') return waitFor(this.actor, (x) => x.value !== 'finalizing').then(() => this.execute(req));
      // a recorded attempt runs nothing: its result is returned even while another attempt runs
      const [cur, busyRunId] = [this.current, this.busyRunId];
      const recorded = cur?.runId === req.runId && cur.attemptId === req.attemptId ? undefined : await this.recordedFor(req);
      if (recorded) return recorded;
      if (!this.busy) return this.execute(req); // (the attempt ended while the log was read)
      throw new ExecutionBusy(this.sessionId, busyRunId);
    }
    if (req.kind === 'prompt' && this.parts.desk.submitting(req.runId) === 'follow_up')
      throw runIdTaken(this.sessionId, req.runId, 'runId', 'session.execute');
    const { token, result } = this.parts.callers.prepare(req);
    // claimed synchronously, before any await: a prompt and a follow-up racing for one id cannot
    // both pass their checks; the session machine's prepareAttempt decides what the request does
    this.actor.send({ type: 'PREPARE', token, request: req, ...(req.kind === 'prompt' ? { claimedRunId: req.runId } : {}) });
    return result;
  }

  /** The session machine's `prepareAttempt` actor: the attempt's run input (registered here), or its answer. */
  private async prepare({ token, request }: PrepareInput): Promise<PrepareOutput> {
    const out = await prepareAttempt(this.parts.attemptSession, request);
    if (!('run' in out)) return out;
    if (this.closed) return { result: notRunResult(request, 'detached', 'the session was closed before the attempt started') };
    this.extras.resuming.begin(out.run);
    this.parts.starts.begin(out.run, token);
    return out;
  }

  /**
   * Runs one attempt like `execute`, returning at once its `textStream`, `events` and `result`;
   * `input` is a message or a request whose ids may be left out (docs/streaming.md).
   * @example
   * const run = session.run('What is 2 + 2?')
   * for await (const text of run.textStream) process.stdout.write(text)
   * console.log((await run.result).status)
   */
  run<S extends z.ZodType>(input: RunRequest, options: { output: S }): RunHandle<z.output<S>>;
  run(input: RunRequest, options?: RunOptions): RunHandle<TOut>;
  run(input: RunRequest, options: RunOptions = {}): RunHandle {
    const req = withRunOptions(
      identifiedRun(parseInput(RunRequest, input, 'session.run'), () => this.newId(), this.runs.open?.runId ?? this.current?.runId),
      options,
    );
    assertRunRequest(req, { sessionId: this.sessionId, model: this.env.model, contentLimits: this.env.contentLimits });
    const typed = req.output !== undefined || this.options.output !== undefined;
    return runHandle(
      this.stream.events$,
      req,
      (r) => this.execute(r.runId === '' ? ({ ...r, runId: undefined } as ExecutionRequest) : r),
      typed,
    );
  }

  private newId(): string {
    return newRunId(this.options.ids);
  }

  /** The machine rests: the settled attempt's caller gets its result, then a waiting input starts its run. */
  private rested(result: ExecutionResult | undefined): void {
    if (result) this.parts.callers.rested(result);
    this.extras.waiting.afterRest();
  }

  /** @internal Starts the run of an input left waiting (from before a restart, or the kill switch) if idle. */
  resumeWaitingInputs(): void {
    this.extras.waiting.resume();
  }

  /** Resolves when nothing executes and no input waits to start its run. */
  waitForIdle(): Promise<void> {
    return this.extras.waiting.whenIdle();
  }

  /**
   * Accepts an input durably (`input/accepted` committed before the receipt). `steer` inputs
   * join the running run before its next model call; `follow_up` inputs start a new run when the
   * current one settles (at once when idle), and so does a steer that no run takes (one accepted
   * after the run's last model call, or on an idle session). The same inputId again returns the
   * same receipt.
   */
  async submitInput(envelope: InputEnvelope): Promise<InputReceipt> {
    const e = parseInput(InputEnvelope, envelope, 'session.submitInput');
    // a follow-up runs as runId = attemptId = inputId, and so does a steer no run takes
    assertRunIdsFit(this.sessionId, e.inputId, e.inputId, 'session.submitInput', ['inputId', 'inputId']);
    this.assertOpen();
    return this.parts.desk.submit(e, {
      checkNewRun: (inputId) => this.parts.assertNewRunId(inputId, 'inputId', 'session.submitInput'),
      assertOpen: () => this.assertOpen(),
      claimedRunId: () => this.actor.getSnapshot().context.claimedRunId,
      accepted: (mode) => {
        // a steer on a free session has no run to join: it starts one of its own, as a follow-up
        if (this.busy) return;
        // over an interrupted run: resumed by default (not at open: only an input submitted now), then the input's run starts
        if (this.runs.blocking && !this.runs.stale && this.extras.resuming.needed) this.extras.resuming.settleForInputs();
        else this.extras.waiting.start();
      },
    });
  }

  /** Withdraws an input not yet consumed (`input/cancelled`); its receipt says what became of it. */
  async cancelInput(inputId: string): Promise<InputReceipt> {
    parseInput(InputEnvelope.shape.inputId, inputId, 'session.cancelInput: inputId');
    this.assertOpen();
    return this.parts.desk.cancel(inputId);
  }

  /**
   * Approves one call of the pending approval (docs/getting-started.md §7), durably; the run
   * resumes once every call is decided, and that last decision's receipt carries its `run`.
   * @example
   * const { undecided, run } = await session.approve(callId)
   */
  approve(callId: string): Promise<ApprovalReceipt> {
    return this.extras.approvals.decide(callId, 'approve', 'session.approve');
  }

  /** Denies one call of the pending approval, as `approve` approves one. */
  deny(callId: string): Promise<ApprovalReceipt> {
    return this.extras.approvals.decide(callId, 'deny', 'session.deny');
  }

  /**
   * Cancels the running attempt (model call aborted, tools signalled; ends `cancelled` once they settle). Resolves
   * false if none runs, or its end is decided (final committed, end committing). `recordId` (internal): its record's id.
   */
  requestCancel(reason = 'requestCancel', recordId?: string): Promise<boolean> {
    return this.closed ? Promise.resolve(false) : this.parts.control.cancel(reason, recordId);
  }

  /** Stops driving the run at its next safe point (after the current step), leaving it resumable. */
  requestDetach(): boolean {
    return this.parts.control.detach();
  }

  /**
   * DESIGN §4 item 10: accepted only for this session, this instance, the running interaction and
   * its run epoch; durable (`steering/accepted`) before the receipt is returned.
   */
  async stopAfterCurrentToolRound(request: StopRequest): Promise<StopReceipt> {
    const req = parseInput(StopRequest, request, 'session.stopAfterCurrentToolRound');
    this.assertOpen();
    return this.parts.control.stopAfterRound(req);
  }

  /** Releases resource locks held by uncertain calls (`resources/released`), once the app has checked what really happened. */
  async releaseResources(keys: string[]): Promise<void> {
    const k = parseInput(ResourceKeys, keys, 'session.releaseResources: keys');
    this.assertOpen();
    await this.parts.records.release(k);
  }

  /** Resource keys currently locked by uncertain calls. */
  get activeResourceLocks(): string[] {
    return [...this.env.heldLocks];
  }

  /** Persists app JSON with the session (`state/updated`). */
  async setStateContext(value: unknown): Promise<void> {
    const v = parseInput(JsonValue, value, 'session.setStateContext');
    this.assertOpen();
    await this.parts.records.setState(v);
  }

  /**
   * While idle: installs `messages` as a new surface base (a `checkpoint/loaded` epoch event) and,
   * if given, the stateContext.
   */
  async loadCheckpoint(checkpoint: { messages: Message[]; stateContext?: unknown }): Promise<void> {
    const c = parseInput(Checkpoint, checkpoint, 'session.loadCheckpoint');
    this.assertOpen();
    await this.parts.records.loadCheckpoint(c, this.busy ? this.busyRunId : undefined);
    this.liveView.refresh();
  }

  /** JSON state for UIs and debugging. */
  snapshot(): SessionSnapshot {
    const snap = this.actor.getSnapshot();
    return snapshotOf({
      sessionId: this.sessionId,
      sessionState: String(snap.value),
      run: snap.children.run?.getSnapshot() as Parameters<typeof snapshotOf>[0]['run'],
      lastResult: this.lastResult,
      // while an attempt runs (a respond or continue included) the session is executing, not
      // waiting on the request that attempt is answering
      waiting: this.current ? undefined : this.runs.open,
      messages: this.env.surface.messages,
      tokens: this.env.prefixTokens + this.env.surface.tokens,
      ...heldBy(this.env),
    });
  }

  /** An `@xstate/store` store holding `snapshot()`, kept current from the session's envelopes. */
  get view(): LiveView['store'] {
    return this.liveView.store;
  }

  /**
   * Stops the session actor. A run in progress is abandoned where it stands (resumable). Resolves
   * once required subscribers have the envelopes queued for them; a second call shares the first's.
   */
  close(): Promise<void> {
    return this.parts.closing.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreClosedError(`session ${this.sessionId}`);
  }
}
