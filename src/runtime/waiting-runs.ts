import type { RunInput } from '../machines/run.machine.js';
import type { AttemptCallers } from './attempt-callers.js';
import type { AttemptStarts } from './attempt-starts.js';
import type { AutoResume } from './auto-resume.js';
import type { InputQueue } from './input-queue.js';
import type { OpenRunTracker } from './open-run-tracker.js';

/** What starting the run of a waiting input reads and does on its session. */
export interface WaitingRunsHost {
  /** An attempt is being prepared, runs or is being settled. */
  busy(): boolean;
  closed(): boolean;
  /** Nothing new may start: the kill switch is set, the session was fenced, or the runtime has no model. */
  held(): boolean;
  runs: OpenRunTracker;
  inputs: InputQueue;
  starts: AttemptStarts;
  callers: AttemptCallers;
  resuming: AutoResume;
  /** Hands the run to the session machine (START). */
  start(run: RunInput): void;
}

/**
 * The runs of inputs left waiting (follow-ups, steers no run took): each starts when the session
 * is free — never over an open run — oldest first, and the session is idle once none can start.
 */
export class WaitingRuns {
  constructor(private readonly h: WaitingRunsHost) {}

  /** Starts the run of an input left waiting (from before a restart, or the kill switch) if idle. */
  resume(): void {
    if (!this.h.busy() && !this.h.closed()) this.start();
  }

  /**
   * Starts the run of the oldest waiting input when the session is free; true if one started.
   * No accepted input waits for an unrelated later one.
   */
  start(): boolean {
    if (this.h.closed() || this.h.held() || this.h.runs.blocking) return false;
    const run = this.h.starts.beginWaiting(this.h.resuming);
    if (!run) return false;
    this.h.start(run);
    return true;
  }

  /** The machine rests: an input accepted while the attempt ran or prepared starts now, or the session is idle. */
  afterRest(): void {
    // a follow-up, or a steer that came after the run's last model call (even one whose attempt ran nothing)
    if (this.start()) return;
    // after the attempt's own promise has settled for its caller
    setImmediate(() => this.h.busy() || this.h.callers.idle());
  }

  /** Resolves when nothing executes and no input waits to start its run. */
  whenIdle(): Promise<void> {
    if (this.h.closed()) return Promise.resolve(); // nothing runs or starts on a closed session
    const startable = this.h.inputs.hasWaiting && !this.h.runs.blocking && !this.h.held();
    if (!this.h.busy() && !startable) return Promise.resolve();
    return this.h.callers.whenIdle();
  }
}
