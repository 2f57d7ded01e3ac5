import type { ToolOutcome } from '../contracts/tools.js';
import type { RunStatus } from '../contracts/requests.js';
import type { LogWriter } from '../persistence/log-writer.js';

// What a cancelled run asks of its agent calls' children (cancel-children.ts, runtime/child-cancel.ts):
// types only, read by the session's services and the actor alike.

/** A child run's spending as its call's result carries it up (docs/agents.md, "Budgets"). */
export type ChildSpending = Pick<Extract<ToolOutcome, { kind: 'cancelled' }>, 'usage' | 'cost' | 'counted' | 'overruns'>;

export interface CancelChildrenInput {
  runId: string;
  /** Seq of the run's first run/start: its agent calls are read from there. */
  fromSeq: number;
  /** The agent calls the run's end answers (left without a result): their children's spending is wanted. */
  answering: string[];
}

/** What became of the child session of one agent call of a cancelled run. */
export interface ChildOfCall {
  callId: string;
  childId: string;
  /**
   * `cancelled`: its open run was ended cancelled now; `settled`: its run had ended before (its
   * status); `left open`: it could not be cancelled (`why`); absent: the child never started a run.
   */
  became?: 'cancelled' | 'settled' | 'left open';
  status?: RunStatus;
  why?: string;
  /** The child run's spending, for a call the run's end answers. */
  spending?: ChildSpending;
}

/** The parent's side of a cancel cascade: its session and the writer whose hold guards every child effect. */
export interface CascadeParent {
  sessionId: string;
  writer: LogWriter;
}

/** What the runtime does for a cancelled run's children (runtime/child-cancel.ts). */
export interface RunChildren {
  /**
   * Ends `cancelled` the open run of every child session started by one of the run's agent calls.
   * Contract: never throws (a child that cannot be cancelled is reported `left open`); touches no
   * child once the parent's writer no longer holds its session, nor once `signal` aborts (the run
   * was stopped: the session closed).
   */
  cancelOpen(parent: CascadeParent, input: CancelChildrenInput, signal: AbortSignal): Promise<ChildOfCall[]>;
}
