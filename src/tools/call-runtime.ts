import type { PendingRequest } from '../contracts/events.js';
import type { Counted } from '../contracts/reservation.js';
import type { ToolContext } from './define-tool.js';

/** A run's request that reaches its running calls besides cancel (which aborts their signal): stop after the round, detach. */
export type CallControl = 'stop' | 'detach';

/**
 * What the runtime's own tools (an agentTool's) read of a call's context besides `ToolContext`:
 * whether the writer running the call still holds its session, and the run's stop and detach
 * requests — the child session of an agent call follows both (docs/agents.md, "Control").
 */
export interface CallRuntime {
  /**
   * The error that fences the writer running the call (its lease lost, another writer took over,
   * closed), or undefined while it may start effects. Contract: synchronous, never throws.
   */
  lost(): unknown;
  /**
   * Whether the writer running the call still holds its session, its fence read again from the
   * store (a writer another process took over learns it here): asked right before each effect on
   * an agent call's child (opening it, running it), after the last await.
   */
  holds(): Promise<boolean>;
  /**
   * Calls `listener` with each control request of the run (at once with those made before),
   * until the returned function withdraws it.
   */
  onControl(listener: (request: CallControl) => void): () => void;
  /**
   * The call gets no result now, whatever its tool returns: its run ends suspended on
   * `pendingRequest` (a child's, with its path) or, without one, detached; a later attempt runs
   * the call again (a resumable call's tool takes up where it stands). `held`: what the call has
   * spent so far (its child's run), shown in the run's result as held until the call answers.
   */
  leaveUnsettled(pendingRequest?: PendingRequest, held?: Counted): void;
}

/** Where a call's context carries its CallRuntime (a symbol: no app tool reads or spreads it by name). */
export const CALL_RUNTIME: unique symbol = Symbol('actorloop.callRuntime');

/** The CallRuntime of a call's context, if the runtime ran it (a tool run by hand has none). */
export const callRuntimeOf = (ctx: ToolContext): CallRuntime | undefined =>
  (ctx as ToolContext & { [CALL_RUNTIME]?: CallRuntime })[CALL_RUNTIME];
