import { ValidationError } from '../contracts/errors.js';
import type { EventStore } from '../persistence/event-store.js';
import type { OpenRunState } from '../persistence/open-run.js';
import { runOpenEventId } from '../persistence/run-ids.js';
import type { InputQueue } from './input-queue.js';

/** The refusal of a run id that names a run already (or one being started). */
export function runIdTaken(sessionId: string, runId: string, field: string, where: string): ValidationError {
  return new ValidationError(where, [
    {
      path: [field],
      message:
        `run ${runId} already exists or is being started in session ${sessionId}: ` +
        `a new run needs a new id (continue or respond to resume that run)`,
    },
  ]);
}

/** Who may hold a run id in a session now. */
export interface RunClaims {
  sessionId: string;
  store: EventStore;
  inputs: InputQueue;
  currentRunId: string | undefined;
  /** The run id a prompt being prepared has claimed. */
  claimedRunId: string | undefined;
  openRun: OpenRunState | undefined;
}

/**
 * A run id names one run: refused (ValidationError) if a run — running, open, settled last, in
 * the log, claimed by a prompt being prepared, or a follow-up waiting to start — already has it.
 */
export async function assertNewRunId(c: RunClaims, runId: string, field: string, where: string): Promise<void> {
  const queued = c.inputs.get(runId);
  const head = c.openRun ? undefined : await c.store.getHead(c.sessionId);
  const taken =
    (queued?.mode === 'follow_up' && queued.status === 'accepted') ||
    c.currentRunId === runId ||
    (field === 'inputId' && c.claimedRunId === runId) ||
    c.openRun?.runId === runId ||
    head?.lastSettledRun?.runId === runId || // also in logs from before run-open ids
    (await c.store.getEventById(c.sessionId, runOpenEventId(runId))) !== undefined;
  if (taken) throw runIdTaken(c.sessionId, runId, field, where);
}
