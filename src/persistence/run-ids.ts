import { ValidationError } from '../contracts/errors.js';
import { MAX_ID_KEY_BYTES } from './codec.js';

/** The id of an attempt's run/start (a respond's or continue's; a prompt's is its run-open id). */
export const runStartEventId = (runId: string, attemptId: string) => `run-start:${runId}:${attemptId}`;
/** The id of an attempt's run/end: executing the same attempt again returns the result it holds. */
export const runEndEventId = (runId: string, attemptId: string) => `run-end:${runId}:${attemptId}`;
/** The id of a run's first run/start (a prompt or follow-up): one per runId in a session. */
export const runOpenEventId = (runId: string) => `run-open:${runId}`;

/**
 * Refuses, before anything is written, a runId/attemptId pair whose run events' ids would not fit
 * the store's id key with the session id (MAX_ID_KEY_BYTES): such a run could start and deliver,
 * then fail to write its run/end and stay open for ever. `fields` names what the caller passed.
 */
export function assertRunIdsFit(
  sessionId: string,
  runId: string,
  attemptId: string,
  where: string,
  fields: readonly [string, string],
): void {
  const id = runStartEventId(runId, attemptId); // the longest id a run writes (a respond's or continue's run/start)
  if (sessionId.length + id.length <= MAX_ID_KEY_BYTES / 3) return; // fits whatever the characters
  const bytes = Buffer.byteLength(sessionId) + Buffer.byteLength(id);
  if (bytes <= MAX_ID_KEY_BYTES) return;
  const field = Buffer.byteLength(attemptId) > Buffer.byteLength(runId) ? fields[1] : fields[0];
  throw new ValidationError(where, [
    {
      path: [field],
      message:
        `too long: the run's event ids (run-start:<${fields[0]}>:<${fields[1]}>) and the session id would take ${bytes} bytes in UTF-8; ` +
        `the store takes at most ${MAX_ID_KEY_BYTES}`,
    },
  ]);
}
