import type { Observable } from 'rxjs';
import type { EventDraft, EventRecord } from '../contracts/events.js';
import type { BlobStore } from './blob-store.js';
import type { SessionHead } from './head.js';
import type { SessionHolders } from './holders.js';
import type { StoredSurface } from './surface.js';
import type { WorkStore } from './work-store.js';

/** What `attachWriter` returns: the new epoch and where the log stands. */
export interface AttachResult {
  writerEpoch: number;
  lastSeq: number;
  lastTurn: number;
}

export interface ReadRange {
  fromSeq?: number;
  toSeq?: number;
}

/**
 * The append-only, per-session event log (DESIGN §2). Every backend passes
 * `test/conformance/event-store.contract.ts`.
 * @example
 * const { writerEpoch, lastSeq } = await store.attachWriter('s1')
 * await store.append('s1', writerEpoch, lastSeq + 1, [
 *   { type: 'step/start', turn: 1, step: 1, attempt: 1, surfaceOp: 'none', payload: {} },
 * ])
 */
export interface EventStore {
  /** Atomically increments the session's writer epoch (fencing every older writer). */
  attachWriter(sessionId: string): Promise<AttachResult>;
  /**
   * Appends drafts all-or-nothing; resolves once they are durable on disk (flushed).
   * Contract: throws StaleWriterError, InvariantViolation, SequenceConflictError (checked in that
   * order), ValidationError for malformed drafts; an identical retry returns the stored events.
   */
  append(sessionId: string, writerEpoch: number, expectedSeq: number, drafts: readonly EventDraft[]): Promise<EventRecord[]>;
  /** Events in seq order, read lazily in pages: constant memory whatever the log's length. */
  readEvents(sessionId: string, range?: ReadRange): AsyncIterable<EventRecord>;
  /** Events from the last surface epoch on whose surfaceOp is not `none`. */
  loadSurface(sessionId: string): Promise<EventRecord[]>;
  /**
   * Optional: the same surface as stored chunks of messages followed by the surface events after
   * them, where the store keeps chunks (the LMDB store: surface-chunks.ts). Opening a session
   * reads this when the store has it, else `loadSurface`.
   */
  loadStoredSurface?(sessionId: string): Promise<StoredSurface>;
  /** The per-session head record (O(1): never reads history), or undefined for an unknown session. */
  getHead(sessionId: string): Promise<SessionHead | undefined>;
  /**
   * Optional: the session's current writer epoch, read synchronously (undefined for an unknown
   * session). A store that can answer without I/O (memory, LMDB) has it, so that a writer checks
   * its fence with no `await` between the check and a tool's start; without it the writer reads
   * `getHead`.
   */
  writerEpochNow?(sessionId: string): number | undefined;
  /** The stored event with this id, or undefined (an indexed look-up, not a scan). */
  getEventById(sessionId: string, eventId: string): Promise<EventRecord | undefined>;
  listSessions(): Promise<string[]>;
  /** Replays the log from `fromSeq`, then follows appends made through this store object. */
  events$(sessionId: string, options?: { fromSeq?: number }): Observable<EventRecord>;
  close(): Promise<void>;
  /**
   * The inbox and the serving workers' leases (work-store.ts), for `runtime.submit` and
   * `runtime.serve`. Every built-in store has it; a store without it cannot be served.
   */
  readonly work?: WorkStore;
  /**
   * Optional: the store's blobs (blob-store.ts), the bytes of content parts kept once each and
   * referenced from the log. Every built-in store has it; a store without it takes text content only.
   */
  readonly blobs?: BlobStore;
  /**
   * Optional: which live process writes each session (holders.ts), so that `openSession` refuses
   * a session another live process holds (SessionHeldError). The LMDB and PostgreSQL stores have
   * it; without it a store works as before and `openSession` never refuses (the writer epoch still fences).
   */
  readonly holders?: SessionHolders;
}
