import type { RecoveryOutcome } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { AnyTool } from '../tools/define-tool.js';
import { loadOpenRun, recoveryOutcome } from './recovery-outcome.js';

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
}

/**
 * The RecoveryOutcome of `sessionId` as `runtime.openSession` would compute it with `tools`,
 * without attaching (the `actorloop recover` default).
 * @example
 * const preview = await previewRecovery(store, 's1', tools) // preview.interruptedRuns, preview.uncertainToolCalls
 */
export async function previewRecovery(store: EventStore, sessionId: string, tools: readonly AnyTool[]): Promise<RecoveryPreview> {
  const head = await store.getHead(sessionId);
  const open = await loadOpenRun(store, sessionId, head);
  const reader = {
    sessionId,
    tools: new Map(tools.map((t) => [t.name, t])),
    heldLocks: new Set(head?.heldLocks ?? []),
    writer: { writerEpoch: head?.writerEpoch ?? 0 },
  };
  const outcome = await recoveryOutcome(store, reader, head, open, { delivered: [], unknown: [] });
  return { readOnly: true, ...outcome, undeliveredFinalIds: (open?.undeliveredFinals ?? []).map((f) => f.finalMessageId) };
}
