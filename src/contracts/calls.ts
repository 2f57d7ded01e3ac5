import type { ToolOutcome } from './tools.js';
import type { PendingRequest } from './events.js';
import type { Counted } from './reservation.js';

/** Where a record sits in its run: the `turn`, `step` and `attempt` fields every record carries. */
export interface StepPosition {
  turn: number;
  step: number;
  attempt: number;
}

/** A call whose intent (`tool/call`) is committed: everything the batch needs, serializable. */
export interface ToolCallIntent {
  callId: string;
  name: string;
  arguments: unknown;
  mode: 'parallel' | 'exclusive';
  resources: string[];
  idempotencyKey: string;
  /**
   * The model's argument text. `arguments` holds the schema's parsed output, but what the log
   * keeps of it is JSON: a call rebuilt from the log (approved, recovered) is parsed again from this.
   */
  rawArguments?: string;
  /** Its tool resumes its own work when run again (an agentTool): recovery runs it again, never uncertain. */
  resumable?: boolean;
}

/** What one tool call came to: its outcome and when it ran. */
export interface ToolCallOutput {
  callId: string;
  name: string;
  outcome: ToolOutcome;
  startedAt: number;
  endedAt: number;
  /**
   * The call has no result yet and gets none now (an agent call whose child suspended or
   * detached): its run ends suspended on the child's request, or detached, and a later attempt
   * runs the call again. `outcome` is then never committed. `held`: what its child has spent so
   * far (reported and counted at reservation), which the run's result shows as held (`reserved`)
   * until the call answers and its spending is the run's own.
   */
  unsettled?: { pendingRequest?: PendingRequest; held?: Counted };
}
