import { isStaleWriterError } from '../contracts/errors.js';
import type { EventDraft, EventRecord, EventType, PayloadOf } from '../contracts/events.js';
import { SURFACE_OPS } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';

/**
 * The session's single writer: stages drafts and commits them in batches (commit points), so a
 * step costs about two disk syncs, not one per event. Tracks the expected seq; a stale epoch
 * marks the writer fenced and every later commit fails the same way.
 */
export class LogWriter {
  private staged: EventDraft[] = [];
  private fencedError: unknown;

  constructor(
    private readonly store: EventStore,
    readonly sessionId: string,
    readonly writerEpoch: number,
    private nextSeq: number,
    private readonly onCommitted: (records: EventRecord[]) => void,
  ) {}

  get fenced(): boolean {
    return this.fencedError !== undefined;
  }

  get lastSeq(): number {
    return this.nextSeq - 1;
  }

  /** Stages one event for the next commit point. */
  stage<T extends EventType>(type: T, at: { turn: number; step: number; attempt: number }, payload: PayloadOf<T>, eventId?: string): void {
    this.staged.push({
      ...(eventId ? { eventId } : {}),
      type,
      turn: at.turn,
      step: at.step,
      attempt: at.attempt,
      surfaceOp: SURFACE_OPS[type],
      payload: payload as Record<string, unknown>,
    });
  }

  get hasStaged(): boolean {
    return this.staged.length > 0;
  }

  /** Discards staged drafts (after a failed commit that will not be retried). */
  discard(): void {
    this.staged = [];
  }

  /** Appends everything staged as one all-or-nothing batch; resolves once it is durable. */
  async commit(): Promise<EventRecord[]> {
    if (this.fencedError !== undefined) throw this.fencedError;
    if (this.staged.length === 0) return [];
    const drafts = this.staged;
    this.staged = [];
    try {
      const records = await this.store.append(this.sessionId, this.writerEpoch, this.nextSeq, drafts);
      this.nextSeq += records.length;
      this.onCommitted(records);
      return records;
    } catch (e) {
      if (isStaleWriterError(e)) this.fencedError = e;
      throw e;
    }
  }
}
