import type { Clock } from '../contracts/clock.js';
import {
  isExecutionBusy,
  isSessionSteeringConflict,
  isStaleWriterError,
  isStoreClosedError,
  isValidationError,
} from '../contracts/errors.js';
import type { InboxOutcome, StoredInboxEntry } from '../contracts/inbox.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { WorkStore } from '../persistence/work-store.js';
import type { ExecutionSession } from './execution-session.js';

/** What applying entries reports, and what it hands back (attempts it started). */
export interface InboxHooks {
  applied?(entry: StoredInboxEntry, outcome: InboxOutcome): void;
  /** An attempt an entry started (a respond, a cancelled continue): its result, when it ends. */
  attempt?(runId: string, attemptId: string, result: Promise<ExecutionResult>): void;
}

const busyPhases = new Set(['preparing', 'executing', 'finalizing']);
/** Attempts one cancel entry makes at most (each crash mid-cancel leaves one interrupted). */
const CANCEL_TRIES = 16;
const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e));

/**
 * Applies a session's inbox (docs/scale-out.md, "The inbox") through the session's own methods,
 * so that each entry writes exactly the events the in-process call writes: `submitInput`,
 * `execute({ kind: 'respond' })`, `stopAfterCurrentToolRound`, `requestCancel`, `cancelInput`.
 * Entries are applied in submit order, one drain at a time; each is recorded applied (fenced by
 * the writer epoch) after its effect is in the log. A crash between the two applies it again,
 * which changes nothing: every effect is idempotent by the entry's id (`input:<inputId>`,
 * attempt `<entryId>`, `steer:<entryId>`, `input-cancelled:<inputId>`), and a cancel finds the
 * run its `inbox-cancel:<entryId>` record names (or none) to cancel. An entry whose apply fails
 * stays pending for the next drain: a race with the session's own calls (an attempt started
 * meanwhile) is the entry's to handle, never a throw that leaves it applied but unmarked.
 */
export class SessionInbox {
  /** The attempt running now, as the session's envelopes tell (run_start until execution_finished). */
  private running: { runId: string; attemptId: string; runEpoch: number } | undefined;
  private startWaiters: (() => void)[] = [];
  private draining: Promise<void> | undefined;
  private again = false;
  private readonly sub: { unsubscribe(): void };
  private closed = false;
  private retry: ReturnType<Clock['setTimeout']> | undefined;
  private retryMs = 0;
  /** Why the last drain `drainRetrying` started failed (undefined once one succeeds). */
  lastDrainError: unknown;
  /** Told of each entry once it is recorded applied (a serving worker reports it). */
  readonly appliedListeners = new Set<(entry: StoredInboxEntry, outcome: InboxOutcome) => void>();

  constructor(
    readonly session: ExecutionSession,
    private readonly store: EventStore,
    private readonly work: WorkStore,
    /** The runtime's clock: the bounded wait for an attempt being prepared to start. */
    private readonly clock: Clock,
    private readonly hooks: InboxHooks = {},
  ) {
    this.sub = session.events$.subscribe({
      next: (env) => {
        const e = env.event;
        if (e.type === 'run_start') {
          this.running = { runId: e.runId, attemptId: e.attemptId, runEpoch: e.runEpoch };
          for (const w of this.startWaiters.splice(0)) w();
        } else if (e.type === 'execution_finished') {
          if (this.running?.attemptId === e.result.attemptId && this.running.runId === e.result.runId) this.running = undefined;
          for (const w of this.startWaiters.splice(0)) w();
        }
      },
    });
  }

  /** The session's writer epoch: the fencing token of every mark. */
  get writerEpoch(): number {
    return this.session.recovery.writerEpoch;
  }

  /** Applies every pending entry; a drain asked for while one runs runs again after it. */
  drain(): Promise<void> {
    if (this.draining) {
      this.again = true;
      return this.draining;
    }
    const run = async () => {
      try {
        do {
          this.again = false;
          await this.drainOnce();
        } while (this.again);
      } finally {
        this.draining = undefined;
      }
    };
    return (this.draining = run());
  }

  /**
   * Drains with no caller to tell (`runtime.submit`'s fast path): a drain that fails (the store
   * unavailable, say) leaves its entries pending and is tried again — after 100 ms, doubling up to
   * 30 s — until one succeeds or the inbox closes; `lastDrainError` keeps the failure. A fenced
   * session (another writer) or a closed one is not retried: its owner applies them.
   */
  drainRetrying(): void {
    this.drain().then(
      () => {
        this.retryMs = 0;
        this.lastDrainError = undefined;
      },
      (err: unknown) => {
        this.lastDrainError = err;
        if (this.ended || isStaleWriterError(err) || isStoreClosedError(err) || this.retry) return;
        this.retryMs = Math.min(Math.max(this.retryMs * 2, 100), 30_000);
        this.retry = this.clock.setTimeout(() => {
          this.retry = undefined;
          if (!this.ended) this.drainRetrying();
        }, this.retryMs);
        (this.retry as { unref?: () => void }).unref?.(); // (a retry keeps no process alive)
      },
    );
  }

  close(): void {
    this.closed = true;
    if (this.retry) this.clock.clearTimeout(this.retry);
    this.retry = undefined;
    this.sub.unsubscribe();
    for (const w of this.startWaiters.splice(0)) w();
  }

  private async drainOnce(): Promise<void> {
    const pending = await this.work.pending(this.session.sessionId);
    for (const entry of pending) {
      const outcome = await this.apply(entry);
      await this.work.markApplied(this.session.sessionId, this.writerEpoch, [{ entryId: entry.entryId, outcome }]);
      this.hooks.applied?.(entry, outcome);
      for (const l of this.appliedListeners) l(entry, outcome);
    }
  }

  /** The inbox closed, or its session closing, closed or fenced: nothing more is applied here. */
  private get ended(): boolean {
    const phase = String(this.session.actor.getSnapshot().value);
    return this.closed || phase === 'closing' || phase === 'closed' || phase === 'fenced';
  }

  private get status(): string {
    return this.session.snapshot().status;
  }

  private get busy(): boolean {
    return busyPhases.has(String(this.session.actor.getSnapshot().value));
  }

  /** The attempt running now; while one is being prepared, waits (bounded) for its run_start. */
  private async runningAttempt(): Promise<typeof this.running> {
    for (let i = 0; i < 50 && this.busy && !this.running; i++) {
      await new Promise<void>((resolve) => {
        const t = this.clock.setTimeout(resolve, 100);
        this.startWaiters.push(() => {
          this.clock.clearTimeout(t);
          resolve();
        });
      });
    }
    return this.busy ? this.running : undefined;
  }

  private async openRunId(): Promise<string | undefined> {
    return (await this.store.getHead(this.session.sessionId))?.openRun?.runId ?? undefined;
  }

  private async apply(stored: StoredInboxEntry): Promise<InboxOutcome> {
    const e = stored.entry;
    const s = this.session;
    try {
      switch (e.kind) {
        case 'input': {
          // an input on an idle session starts a run (as a follow-up: runId = inputId)
          const mode = e.mode === 'steer' && this.status === 'idle' && !this.busy ? 'follow_up' : e.mode;
          const receipt = await s.submitInput({ inputId: e.inputId, mode, message: e.message });
          return {
            status: 'applied',
            reason: `input ${receipt.status}${mode !== e.mode ? ' (a steer on an idle session starts a run)' : ''}`,
          };
        }
        case 'cancel_input': {
          const receipt = await s.cancelInput(e.inputId);
          return { status: 'applied', reason: `input ${receipt.status}` };
        }
        case 'stop_after_round': {
          const cur = await this.runningAttempt();
          if (!cur) return { status: 'rejected', reason: 'no run is executing' };
          await s.stopAfterCurrentToolRound({
            sessionId: s.sessionId,
            sessionInstanceId: s.sessionInstanceId,
            interactionId: cur.runId,
            expectedRunEpoch: cur.runEpoch,
            idempotencyKey: e.entryId,
          });
          return { status: 'applied', reason: `stop accepted for run ${cur.runId}` };
        }
        case 'cancel':
          return await this.cancel(e.entryId, e.reason ?? 'cancelled through the inbox');
        case 'respond':
          return await this.respond(e.entryId, e.runId, e.questionId, e.answer);
      }
    } catch (err) {
      if (isValidationError(err) || isSessionSteeringConflict(err)) return { status: 'rejected', reason: messageOf(err) };
      throw err;
    }
  }

  /** Asks the running attempt (if any) to stop after its current tool round; false if none runs. */
  async stopAfterRound(idempotencyKey: string): Promise<boolean> {
    const cur = await this.runningAttempt();
    if (!cur) return false;
    const s = this.session;
    await s.stopAfterCurrentToolRound({
      sessionId: s.sessionId,
      sessionInstanceId: s.sessionInstanceId,
      interactionId: cur.runId,
      expectedRunEpoch: cur.runEpoch,
      idempotencyKey,
    });
    return true;
  }

  /**
   * Cancels the run running or open when the entry is first applied, and only that run: its effect
   * is recorded under `inbox-cancel:<entryId>` (the `cancellation/requested` it writes, naming the
   * run), so that a re-apply (a crash came before the mark) finds that run to cancel, or none —
   * never a later run.
   */
  private async cancel(entryId: string, reason: string): Promise<InboxOutcome> {
    const s = this.session;
    const recordId = inboxCancelEventId(entryId);
    const recorded = await this.store.getEventById(s.sessionId, recordId);
    const named = recorded?.payload.runId;
    // the run this entry cancels, once known (first seen, or named by its record)
    let target = typeof named === 'string' ? named : undefined;
    // (the record is written once: asked for by every cancel this entry sends until the log holds it —
    // a cancel refused, or an attempt answered from the log without starting, wrote none)
    let unrecorded = !recorded;
    const record = () => (unrecorded ? recordId : undefined);
    const none = () => ({
      status: 'applied' as const,
      reason: target ? `run ${target} is not open: nothing to cancel` : 'nothing to cancel',
    });
    for (let n = 1; ; ) {
      if (this.busy) {
        const cur = await this.runningAttempt();
        if (target === undefined || cur?.runId === target) {
          target ??= cur?.runId;
          if (await s.requestCancel(reason, record()))
            return { status: 'applied', reason: `cancel requested for run ${cur?.runId ?? '(starting)'}` };
        }
        // too late for that attempt (its end decided), or another run's: looked at again once the session rests
        await s.waitForIdle();
        continue;
      }
      const status = this.status;
      if (status !== 'suspended' && status !== 'detached') return none();
      const runId = await this.openRunId();
      if (!runId || (target !== undefined && runId !== target)) return none();
      target = runId;
      // an attempt that started while the head was read (an approval's respond) is the one to cancel
      if (this.busy) continue;
      // an open run nobody runs: an attempt that starts cancelled settles it (run/end cancelled) —
      // attempt `<entryId>`, or, applied again after a crash interrupted that attempt (the run still
      // open), `<entryId>~2`, …: an interrupted attempt is never run again, a new one cancels
      const attemptId = n === 1 ? entryId : `${entryId}~${n}`;
      const result = s.execute({ kind: 'continue', runId, attemptId });
      await s.requestCancel(reason, record());
      this.hooks.attempt?.(runId, attemptId, result);
      const r = await result;
      unrecorded = !(await this.store.getEventById(s.sessionId, recordId));
      if (r.status === 'cancelled' || r.status === 'fenced' || n >= CANCEL_TRIES || (await this.openRunId()) !== runId)
        return { status: 'applied', reason: `run ${runId} ${r.status}` };
      n++;
    }
  }

  private async respond(entryId: string, runId: string | undefined, questionId: string, answer: unknown): Promise<InboxOutcome> {
    const s = this.session;
    const target = runId ?? (await this.openRunId());
    if (!target) return { status: 'rejected', reason: 'no run is waiting for an answer' };
    for (;;) {
      try {
        const result = s.execute({ kind: 'respond', runId: target, attemptId: entryId, questionId, answer });
        this.hooks.attempt?.(target, entryId, result);
        // recorded once its attempt has started (run/start in the log): a redo finds it recorded
        const first = await Promise.race([result.then((r) => ({ r })), this.started(entryId)]);
        if (first && 'r' in first)
          return { status: 'applied', reason: `run ${target} ${first.r.status}${first.r.error ? `: ${first.r.error.message}` : ''}` };
        return { status: 'applied', reason: `attempt ${entryId} of run ${target} started` };
      } catch (err) {
        if (!isExecutionBusy(err)) throw err;
        await s.waitForIdle(); // another attempt runs: the answer is for the run once it rests
      }
    }
  }

  /** Resolves when the attempt `attemptId` has started (its run_start envelope). */
  private async started(attemptId: string): Promise<undefined> {
    // (an attempt that ends without starting settles the race through its result instead)
    while (this.running?.attemptId !== attemptId) await new Promise<void>((resolve) => this.startWaiters.push(resolve));
    return undefined;
  }
}

/** The event id of the `cancellation/requested` an inbox cancel writes: the run it cancels. */
export const inboxCancelEventId = (entryId: string): string => `inbox-cancel:${entryId}`;

/** A fenced mark: the session has another writer (this one stops). */
export const isFencedMark = isStaleWriterError;
