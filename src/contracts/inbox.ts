import { z } from 'zod';
import { StaleWriterError } from './errors.js';
import { IdInput } from './ids.js';
import { JsonValue } from './json.js';
import { PromptMessage } from './requests.js';

const id = IdInput.max(200);
/** Checked as JSON at run time; typed `unknown` (an answer's shape is the question's). */
const AnyJson: z.ZodType<unknown> = JsonValue;

/**
 * A request for a session written to its inbox by any process (`runtime.submit`), without
 * becoming the session's writer. The session's owner (a serving worker, or this runtime if it has
 * the session open) applies it to the log exactly once, as the in-process call of the same name
 * would (docs/scale-out.md, "The inbox").
 * - `input`: on an idle session it starts a new run whose runId is the inputId (`inputRunId`);
 *   while a run is open it is that run's follow-up or steer, as `session.submitInput`.
 * - `respond`: answers the pending approval or question (`execute({ kind: 'respond' })`), as
 *   attempt `entryId` of run `runId` (default: the open run).
 * - `stop_after_round`: `session.stopAfterCurrentToolRound` for the attempt running when applied.
 * - `cancel`: `session.requestCancel` (an open run that is not running is continued cancelled).
 * - `cancel_input`: `session.cancelInput`.
 * @example
 * await runtime.submit('s1', { kind: 'input', inputId: 'i1', mode: 'follow_up', message: 'hi' })
 */
export const InboxEntry = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('input'), inputId: id, mode: z.enum(['follow_up', 'steer']), message: PromptMessage }),
  z.strictObject({ kind: z.literal('respond'), entryId: id, runId: id.optional(), questionId: id, answer: AnyJson }),
  z.strictObject({ kind: z.literal('stop_after_round'), entryId: id, reason: z.string().max(2000).optional() }),
  z.strictObject({ kind: z.literal('cancel'), entryId: id, reason: z.string().max(2000).optional() }),
  z.strictObject({ kind: z.literal('cancel_input'), entryId: id, inputId: id }),
]);
export type InboxEntry = z.infer<typeof InboxEntry>;

/** The id an entry is idempotent by: `inputId` for inputs, `entryId` for the rest. */
export const entryIdOf = (e: InboxEntry): string => (e.kind === 'input' ? e.inputId : e.entryId);

/** The runId of the run an input starts on an idle session (also a follow-up's runId): the inputId. */
export const inputRunId = (inputId: string): string => inputId;

/** What `runtime.submit` resolves with once the entry is durable (or known refused). */
export const InboxReceipt = z.object({
  sessionId: z.string(),
  /** `inputId` for inputs. */
  entryId: z.string(),
  kind: z.enum(['input', 'respond', 'stop_after_round', 'cancel', 'cancel_input']),
  /** `already_accepted`: the same entry (same id, same content) was submitted before. */
  status: z.enum(['accepted', 'already_accepted', 'refused']),
  reason: z.string().optional(),
});
export type InboxReceipt = z.infer<typeof InboxReceipt>;

/** What applying an entry did (recorded on the stored entry by the owner that applied it). */
export const InboxOutcome = z.object({
  status: z.enum(['applied', 'rejected']),
  /** Why it was rejected, or what it found (e.g. "nothing to cancel"). */
  reason: z.string().optional(),
});
export type InboxOutcome = z.infer<typeof InboxOutcome>;

/** An entry as the store keeps it. `seq` counts the session's entries from 1 in submit order. */
export const StoredInboxEntry = z.object({
  sessionId: z.string(),
  entryId: z.string(),
  seq: z.number().int().positive(),
  entry: InboxEntry,
  submittedAt: z.string(),
  applied: z.object({ writerEpoch: z.number().int().positive(), at: z.string(), outcome: InboxOutcome }).optional(),
});
export type StoredInboxEntry = z.infer<typeof StoredInboxEntry>;

/** A serving worker as the store lists it (`actorloop workers`). */
export const WorkerInfo = z.object({
  workerId: z.string(),
  host: z.string(),
  pid: z.number().int(),
  concurrency: z.number().int(),
  startedAt: z.string(),
  heartbeatAt: z.string(),
  /** Its heartbeat is fresher than its lease time: it is alive (as far as the store can tell). */
  live: z.boolean(),
});
export type WorkerInfo = z.infer<typeof WorkerInfo>;

/** A session's lease and work counters (`actorloop workers`). */
export const LeaseInfo = z.object({
  sessionId: z.string(),
  workerId: z.string().nullable(),
  /** The writer epoch the lease is bound to (the fencing token), once the owner attached. */
  writerEpoch: z.number().int().nullable(),
  leaseUntil: z.string().nullable(),
  expired: z.boolean(),
  /** Entries submitted / applied. */
  inboxSeq: z.number().int(),
  appliedSeq: z.number().int(),
  /** Released with a run left open (detached at shutdown): the next worker continues it. */
  resume: z.boolean(),
});
export type LeaseInfo = z.infer<typeof LeaseInfo>;

/** What `runtime.serve` reports (`handle.events$`). */
export type ServeEvent =
  | { type: 'started'; workerId: string }
  | { type: 'claimed'; workerId: string; sessionId: string; previousOwner?: string; expired: boolean }
  | { type: 'attached'; workerId: string; sessionId: string; writerEpoch: number }
  | { type: 'applied'; workerId: string; sessionId: string; entryId: string; kind: InboxEntry['kind']; outcome: InboxOutcome }
  | { type: 'resumed'; workerId: string; sessionId: string; runId: string; attemptId: string }
  | { type: 'released'; workerId: string; sessionId: string; resume: boolean }
  | { type: 'lease_lost'; workerId: string; sessionId: string; reason: string }
  | { type: 'fenced'; workerId: string; sessionId: string; writerEpoch: number }
  | { type: 'error'; workerId: string; sessionId?: string; message: string }
  | { type: 'stopping'; workerId: string }
  | { type: 'stopped'; workerId: string };

/** `runtime.serve` options. */
export const ServeOptions = z.strictObject({
  /** Sessions this worker runs at once. */
  concurrency: z.number().int().positive().max(10_000).default(16),
  /** How long a claim lasts without renewal; renewed every third of it. */
  leaseMs: z.number().int().min(100).max(3_600_000).default(15_000),
  /** Stops serving (gracefully, as `handle.stop()`) when aborted. */
  signal: z.instanceof(AbortSignal).optional(),
  /** How often the store is asked for work without a wake-up (NOTIFY, an in-process submit). */
  pollMs: z.number().int().min(5).max(600_000).default(1000),
  /** At shutdown, how long running sessions get to stop after their tool round before they are detached. */
  shutdownGraceMs: z.number().int().nonnegative().max(3_600_000).default(10_000),
  /**
   * What shutdown asks of a running session: `stop_after_round` (default) ends its run `stopped`
   * after the current tool round (detached if it has not by `shutdownGraceMs`; the next worker's
   * attempt honours the accepted stop); `detach` stops driving it at its next safe point and
   * leaves the run open for the next worker to continue (a rolling deploy that users do not see).
   */
  shutdown: z.enum(['stop_after_round', 'detach']).default('stop_after_round'),
  /** A session left idle this long with nothing in its inbox is released (0: at once). */
  idleReleaseMs: z.number().int().nonnegative().max(3_600_000).default(0),
  /** This worker's id in the store (default: host-pid-random). */
  workerId: id.optional(),
});
export type ServeOptions = z.input<typeof ServeOptions>;

/** `runtime.waitForResult` options. */
export const WaitForResultOptions = z.strictObject({
  signal: z.instanceof(AbortSignal).optional(),
  /** How often the log is read again when this process gets no wake-up (another process's run). */
  pollMs: z.number().int().min(5).max(600_000).default(250),
});
export type WaitForResultOptions = z.input<typeof WaitForResultOptions>;

/**
 * A serving worker's lease on a session is lost (not renewed, expired by the worker's own clock,
 * or taken over): its writer is fenced as by a newer epoch (`isStaleWriterError` holds), so it
 * commits nothing more, starts no tool and delivers nothing.
 */
export class LeaseLostError extends StaleWriterError {
  constructor(
    sessionId: string,
    writerEpoch: number,
    readonly reason: string,
  ) {
    super(sessionId, writerEpoch, writerEpoch);
    this.message = `session ${sessionId}: the serving worker's lease (writer epoch ${writerEpoch}) is lost: ${reason}`;
  }
}
