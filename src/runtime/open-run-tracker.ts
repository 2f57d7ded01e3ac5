import type { EventStore } from '../persistence/event-store.js';
import type { PendingRequest } from '../contracts/events.js';
import { awaitedRequest, type OpenRunState } from '../persistence/open-run.js';
import { loadOpenRun } from '../persistence/open-run-read.js';

/**
 * What the session knows of its open (started, unsettled) run between attempts: the run as read
 * from the log, whether that read is out of date (a read after an attempt failed: read it again
 * before the next one), and stops accepted for a run after its attempt ended (its next attempt,
 * in this process or another, stops).
 */
export class OpenRunTracker {
  open: OpenRunState | undefined;
  /** The open run could not be read back after an attempt: what is open is unknown until it is. */
  stale = false;
  private readonly stopsAfterEnd = new Set<string>();

  constructor(
    private readonly store: EventStore,
    private readonly sessionId: string,
    open: OpenRunState | undefined,
  ) {
    this.open = open;
  }

  /** The request the open run waits for an answer to (none once its cancel stands: it is interrupted). */
  get asked(): PendingRequest | undefined {
    return this.open ? awaitedRequest(this.open) : undefined;
  }

  /** No new run may start over it: a run is open, or what is open is unknown. */
  get blocking(): boolean {
    return this.open !== undefined || this.stale;
  }

  /** Reads the open run from the log again (throws when the log cannot be read). */
  async reload(): Promise<void> {
    const open = await loadOpenRun(this.store, this.sessionId, await this.store.getHead(this.sessionId));
    // a stop accepted while this read ran (just as its attempt ended) may not be in what it read
    if (open && this.stopsAfterEnd.has(open.runId)) open.stopAccepted = true;
    this.open = open;
    this.stale = false;
  }

  /** After an attempt that may have left its run open: read it back, or mark it unknown. */
  async afterAttempt(): Promise<void> {
    try {
      await this.reload();
    } catch {
      // no follow-up starts over a run that may still be open; the next execute reads it again
      this.stale = true;
    }
  }

  /** Before an attempt: a stale read is done again. */
  async current(): Promise<OpenRunState | undefined> {
    if (this.stale) await this.reload();
    return this.open;
  }

  /** The run settled: nothing is open. */
  settled(runId: string): void {
    this.open = undefined;
    this.stale = false;
    this.stopsAfterEnd.delete(runId);
  }

  /** A stop accepted for `runId` after its attempt ended: the run's next attempt honours it. */
  stopAccepted(runId: string): void {
    this.stopsAfterEnd.add(runId);
    if (this.open?.runId === runId) this.open.stopAccepted = true;
  }
}
