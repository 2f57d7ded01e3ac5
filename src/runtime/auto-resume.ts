import { isExecutionBusy } from '../contracts/errors.js';
import { STILL_OPEN, type ExecutionResult, type Recovered, type RecoveryOutcome } from '../contracts/requests.js';
import type { RunInput } from '../machines/run.machine.js';
import { awaitedRequest, type OpenRunState } from '../persistence/open-run.js';

/**
 * How a session treats a run left interrupted (crash, lost lease, detach) when a new run starts
 * on it (docs/recovery.md): `auto` continues it first, `manual` refuses the new run
 * (ExecutionBusy 'interrupted') and leaves it to the app; `served`, a serving worker's session,
 * leaves it to the worker, which continues it itself.
 */
export type ResumeMode = 'auto' | 'manual' | 'served';

/** What resuming reads and does on its session. */
export interface ResumingSession {
  /** The open run as the session knows it now. */
  openRun(): OpenRunState | undefined;
  /** What opening the session found (its redelivery state). */
  recovery: RecoveryOutcome;
  /** Executes a continue of `runId` (session.execute). */
  continueRun(runId: string, attemptId: string): Promise<ExecutionResult>;
  /** Resolves when nothing runs and no input waits to start. */
  waitForIdle(): Promise<void>;
  newId(): string;
  /** An attempt is being prepared, runs or is being settled. */
  busy(): boolean;
  assertOpen(): void;
}

/**
 * Resume by default: before a new run (a prompt, a follow-up input) starts over an interrupted
 * run, that run is continued — once, however many new runs wait for it — and the first new run
 * after it reports what the recovery found (`result.recovered`). A run suspended on an approval
 * or a question is not interrupted: it waits for its answer, and a new prompt stays refused
 * (ExecutionBusy 'suspended').
 */
export class AutoResume {
  private settling: Promise<void> | undefined;
  /** The continue attempt under way (any: the app's, a worker's or this one's). */
  private continuing: { runId: string; attemptId: string } | undefined;
  /** What the last recovery found, for the next new run's result. */
  private found: Recovered | undefined;

  constructor(
    readonly mode: ResumeMode,
    private readonly s: ResumingSession,
  ) {}

  /** A new run must first settle an interrupted run (auto mode only). */
  get needed(): boolean {
    const open = this.s.openRun();
    return this.mode === 'auto' && open !== undefined && !awaitedRequest(open);
  }

  /**
   * Continues the interrupted run; every caller waiting at once shares one continue. Resolves
   * when it has ended (however it ended: a run still open after it refuses the new run as before).
   */
  settle(): Promise<void> {
    return (this.settling ??= this.continueOpen().finally(() => (this.settling = undefined)));
  }

  /**
   * Before a new prompt: the interrupted run settled, then the inputs it held back run (the prompt
   * runs after them) — unless the prompt is recorded already (`recorded`: the same ids again run
   * nothing), whose result is returned, nothing continued.
   */
  async beforePrompt(recorded: () => Promise<ExecutionResult | undefined>): Promise<ExecutionResult | undefined> {
    const found = await recorded();
    if (found) return found;
    await this.settle();
    if (this.s.busy()) await this.s.waitForIdle();
    this.s.assertOpen();
    return undefined;
  }

  /**
   * An input submitted over the interrupted run: settles it in the background; the input's run
   * starts when the session rests (a run the continue left open keeps it waiting, as with `manual`).
   */
  settleForInputs(): void {
    void this.settle().catch(() => undefined);
  }

  private async continueOpen(): Promise<void> {
    const open = this.s.openRun();
    if (!open || awaitedRequest(open)) return;
    try {
      await this.s.continueRun(open.runId, this.s.newId());
    } catch (e) {
      // another attempt runs (a worker's continue, an input's run): the new run waits for it
      if (!isExecutionBusy(e)) throw e;
      await this.s.waitForIdle();
    }
  }

  /** An attempt begins: a continue is watched; a new run takes what the last recovery found. */
  begin(run: RunInput): void {
    if (run.kind === 'continue') this.continuing = { runId: run.runId, attemptId: run.attemptId };
    else if ((run.kind === 'prompt' || run.kind === 'follow_up') && this.found) {
      run.recovered = this.found;
      this.found = undefined;
    }
  }

  /** An attempt settled: a continue that ended its run is what the next new run reports. */
  settled(r: ExecutionResult): void {
    const c = this.continuing;
    if (!c || c.runId !== r.runId || c.attemptId !== r.attemptId) return;
    this.continuing = undefined;
    if (this.mode === 'manual' || STILL_OPEN.has(r.status)) return;
    const final = r.finalMessageId;
    const { deliveredFinalIds, deliveryUnknownFinalIds } = this.s.recovery;
    this.found = {
      runId: r.runId,
      attemptId: r.attemptId,
      outcome: r.outcome,
      status: r.status,
      uncertainCalls: r.uncertainCalls,
      deliveredFinalIds: unique([...deliveredFinalIds, ...(final && r.status === 'succeeded' ? [final] : [])]),
      deliveryUnknownFinalIds: unique([...deliveryUnknownFinalIds, ...(final && r.status === 'delivery_unknown' ? [final] : [])]),
    };
  }
}

const unique = (ids: string[]) => [...new Set(ids)];
