import type { RecoveryOutcome } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { AnyTool } from '../tools/define-tool.js';
import { childSessionId } from './agent-calls.js';
import { loadOpenRun } from '../persistence/open-run-read.js';
import { recoveryOutcome } from './recovery-outcome.js';

/**
 * What opening the session would find, read from the log alone: no writer attaches, nothing is
 * appended, no epoch moves, so a process running the session goes on undisturbed.
 * `writerEpoch` is the current writer's epoch (opening would take the next one);
 * `undeliveredFinalIds` are final answers committed without a delivery record, which opening
 * redelivers (an idempotent owner) or records `delivery/unknown`.
 */
export interface RecoveryPreview extends RecoveryOutcome {
  readOnly: true;
  undeliveredFinalIds: string[];
  /** The agent calls without a result that a continue resumes: each one's child run goes on (never uncertain). */
  resumedAgentCalls: { callId: string; name: string; childSessionId: string }[];
}

export interface PreviewOptions {
  /**
   * Take an agent call whose tool is not among `tools` as one the opening runtime defines (a
   * reader that does not know the app's agents, as the CLI, which knows the demo's tools only).
   */
  agentsDefined?: boolean;
}

/**
 * The RecoveryOutcome of `sessionId` as `runtime.openSession` would compute it with `tools`,
 * without attaching (the `actorloop recover` default).
 * @example
 * const preview = await previewRecovery(store, 's1', tools) // preview.interruptedRuns, preview.uncertainToolCalls
 */
export async function previewRecovery(
  store: EventStore,
  sessionId: string,
  tools: readonly AnyTool[],
  options: PreviewOptions = {},
): Promise<RecoveryPreview> {
  const head = await store.getHead(sessionId);
  const open = await loadOpenRun(store, sessionId, head);
  const reader = {
    sessionId,
    tools: new Map(tools.map((t) => [t.name, t])),
    heldLocks: new Set(head?.heldLocks ?? []),
    writer: { writerEpoch: head?.writerEpoch ?? 0 },
    ...(options.agentsDefined ? { agentsDefined: true } : {}),
  };
  const outcome = await recoveryOutcome(store, reader, head, open, { delivered: [], unknown: [] });
  // an agent call left out of the uncertain calls is one a continue resumes (recoveryOutcome's rule)
  const uncertain = new Set(outcome.uncertainToolCalls.map((c) => c.callId));
  const resumedAgentCalls = (open?.unresolvedCalls ?? [])
    .filter((c) => c.resumable && !uncertain.has(c.callId))
    .map((c) => ({ callId: c.callId, name: c.name, childSessionId: childSessionId({ sessionId, idempotencyKey: c.idempotencyKey }) }));
  return {
    readOnly: true,
    ...outcome,
    undeliveredFinalIds: (open?.undeliveredFinals ?? []).map((f) => f.finalMessageId),
    resumedAgentCalls,
  };
}
