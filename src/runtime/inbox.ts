import type { Clock } from '../contracts/clock.js';
import { isExecutionBusy, isSessionSteeringConflict, isStaleWriterError, isValidationError } from '../contracts/errors.js';
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
 * same run (or none) to cancel.
 */
export class SessionInbox {
  /** The attempt running now, as the session's envelopes tell (run_start until execution_finished). */
  private running: { runId: string; attemptId: string; runEpoch: number } | undefined;
  private startWaiters: (() => void)[] = [];
  private draining: Promise<void> | undefined;
  private again = false;
  private readonly sub: { unsubscribe(): void };
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

  close(): void {
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

  private async cancel(entryId: string, reason: string): Promise<InboxOutcome> {
    const s = this.session;
    if (this.busy) {
      const cur = await this.runningAttempt();
      if (await s.requestCancel(reason)) return { status: 'applied', reason: `cancel requested for run ${cur?.runId ?? '(starting)'}` };
      // too late for that attempt (its end decided): a run it leaves open is cancelled below
      await s.waitForIdle();
    }
    const status = this.status;
    if (status === 'suspended' || status === 'detached') {
      const runId = await this.openRunId();
      if (!runId) return { status: 'applied', reason: 'nothing to cancel' };
      // an open run nobody runs: an attempt that starts cancelled settles it (run/end cancelled) —
      // attempt `<entryId>`, or, applied again after a crash interrupted that attempt (the run still
      // open), `<entryId>~2`, …: an interrupted attempt is never run again, a new one cancels
      for (let n = 1; ; n++) {
        const attemptId = n === 1 ? entryId : `${entryId}~${n}`;
        const result = s.execute({ kind: 'continue', runId, attemptId });
        await s.requestCancel(reason);
        this.hooks.attempt?.(runId, attemptId, result);
        const r = await result;
        if (r.status === 'cancelled' || r.status === 'fenced' || n >= CANCEL_TRIES || (await this.openRunId()) !== runId)
          return { status: 'applied', reason: `run ${runId} ${r.status}` };
      }
    }
    return { status: 'applied', reason: 'nothing to cancel' };
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

/** A fenced mark: the session has another writer (this one stops). */
export const isFencedMark = isStaleWriterError;
