import {
  isInvariantViolation,
  isSequenceConflictError,
  isStaleWriterError,
  isStoreError,
  isStoreUnavailableError,
  isValidationError,
  LogDivergedError,
  StaleWriterError,
} from '../contracts/errors.js';
import type { EventDraft, EventRecord } from '../contracts/events.js';
import { prepareDrafts, sameContent, type PreparedDraft } from './codec.js';
import type { EventStore } from './event-store.js';

/**
 * What became of an append whose answer did not say, read back from the log: its records, found
 * at the seqs it was sent for; nothing of it; or the session taken over by another writer.
 */
export type AppendOutcome = { kind: 'landed'; records: EventRecord[] } | { kind: 'absent' } | { kind: 'fenced'; error: StaleWriterError };

/**
 * Whether a failed append's error proves that nothing of it is stored: the store's checks refused
 * it (stale writer, invariant, sequence, validation), or the store says so (`not_written`,
 * StoreError). Any other failure — a connection dropped after COMMIT, a rejection after the
 * write was durable — leaves its outcome to be read from the log.
 */
export function provesNotWritten(e: unknown): boolean {
  return (
    isStaleWriterError(e) ||
    isSequenceConflictError(e) ||
    isInvariantViolation(e) ||
    isValidationError(e) ||
    isStoreError(e) ||
    (isStoreUnavailableError(e) && e.outcome === 'not_written')
  );
}

/**
 * Reads what became of the append of `drafts` at `fromSeq` by the writer of `writerEpoch`: the
 * session's head, then the records past `fromSeq - 1`. Landed only when those are exactly the
 * drafts (sameRecords); records there that are not throw LogDivergedError. Read failures are
 * thrown as they are (the outcome stays unknown).
 */
export async function readAppendOutcome(
  store: EventStore,
  sessionId: string,
  writerEpoch: number,
  fromSeq: number,
  drafts: readonly EventDraft[],
): Promise<AppendOutcome> {
  const head = await store.getHead(sessionId);
  const epoch = head?.writerEpoch ?? 0;
  if (epoch !== writerEpoch) return { kind: 'fenced', error: new StaleWriterError(sessionId, writerEpoch, epoch) };
  const lastSeq = head?.lastSeq ?? 0;
  if (lastSeq === fromSeq - 1) return { kind: 'absent' };
  if (lastSeq < fromSeq) throw new LogDivergedError(sessionId, writerEpoch, fromSeq, lastSeq, `the log ends at seq ${lastSeq}`);
  const records: EventRecord[] = [];
  for await (const r of store.readEvents(sessionId, { fromSeq, toSeq: lastSeq })) records.push(r);
  const mismatch = recordsMismatch(records, prepareDrafts(drafts, 'append', sessionId), writerEpoch);
  if (mismatch !== undefined) throw new LogDivergedError(sessionId, writerEpoch, fromSeq, lastSeq, mismatch);
  return { kind: 'landed', records };
}

/**
 * Why `records` are not exactly the append of `drafts` by the writer of `writerEpoch` (one record
 * per draft, in order, at that epoch, with its type, turn, step, attempt, surface op and payload,
 * and its id where the caller chose one), or undefined when they are.
 */
export function recordsMismatch(
  records: readonly EventRecord[],
  drafts: readonly PreparedDraft[],
  writerEpoch: number,
): string | undefined {
  if (records.length !== drafts.length) return `${records.length} records where the append had ${drafts.length} drafts`;
  for (let i = 0; i < drafts.length; i++) {
    const d = drafts[i]!;
    const r = records[i]!;
    if (r.writerEpoch !== writerEpoch) return `seq ${r.seq} was written at epoch ${r.writerEpoch}`;
    if (d.callerId && r.eventId !== d.eventId)
      return `seq ${r.seq} has id ${JSON.stringify(r.eventId)}, the draft ${JSON.stringify(d.eventId)}`;
    if (!sameContent(d, r)) return `seq ${r.seq} (${r.type}) differs from the draft (${d.type})`;
  }
  return undefined;
}
