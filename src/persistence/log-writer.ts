import {
  isLogDivergedError,
  isSequenceConflictError,
  isStaleWriterError,
  LogDivergedError,
  StaleWriterError,
} from '../contracts/errors.js';
import type { EventDraft, EventRecord, EventType, PayloadOf } from '../contracts/events.js';
import { SURFACE_OPS } from '../contracts/events.js';
import type { Message } from '../contracts/message.js';
import { provesNotWritten, readAppendOutcome } from './append-outcome.js';
import { prepareAhead } from './codec.js';
import type { EventStore } from './event-store.js';
import type { SessionProjection } from './projection.js';
import { estimateTokens, surfaceMessages } from './surface.js';

/** Told of every append this writer commits, in commit order, after the projection is applied. */
export type CommitListener = (records: readonly EventRecord[]) => void;

/** A commit under way that a caller did not wait for (LogWriter.commitAhead). */
interface Ahead {
  /** The surface messages it adds, until the projection has them (then empty). */
  messages: Message[];
  tokens: number;
  /** Its outcome: resolves when durable, rejects with its error (results put back first). */
  done: Promise<unknown>;
  /** Resolves when it settled either way. */
  settled: Promise<void>;
  /** Set when it failed: kept (and `landed()` rejects with it) until the next commit writes what it put back. */
  failure?: { error: unknown };
}

const LANDED: Promise<void> = Promise.resolve();

/** Why a writer stops when an append it reported failed is found in the log later (LogDivergedError's reason). */
const LANDED_LATE =
  'an append whose outcome could not be read when it failed is in the log after all; its caller was told it failed, ' +
  'so this writer commits nothing more (reopen the session: recovery reads the log)';

/**
 * The session's single writer: stages drafts and commits them in batches (commit points), so a
 * step costs about two disk syncs, not one per event. Tracks the expected seq; a stale epoch
 * marks the writer fenced and every later commit fails the same way. Each committed append is
 * applied to the session's projection, then handed to the commit listener (the envelopes). Drafts
 * it does not name get ids from `eventId` when given (else the store makes them). An append that
 * failed without proving it unwritten is read back from the log (append-outcome.ts): found there,
 * it counts as committed (docs/architecture.md, "An append whose answer is lost").
 */
export class LogWriter {
  private staged: EventDraft[] = [];
  private fencedError: unknown;

  constructor(
    private readonly store: EventStore,
    readonly sessionId: string,
    readonly writerEpoch: number,
    private nextSeq: number,
    /** Applied as each append commits: what the session's live state reads. */
    readonly projection: SessionProjection,
    private readonly options: { onCommitted?: CommitListener; eventId?: () => string } = {},
  ) {}

  get fenced(): boolean {
    return this.fencedError !== undefined;
  }

  /**
   * A serving worker's lease check (runtime/serve.ts): returns the error to fence this writer with
   * once its lease is lost or expired by the worker's own clock, checked before every commit and
   * right before a tool starts or a final is delivered. Contract: synchronous, never throws.
   */
  guard?: () => unknown;

  private guarded(): boolean {
    const lost = this.guard?.();
    if (lost !== undefined && this.fencedError === undefined) this.fencedError = lost;
    return this.fencedError !== undefined;
  }

  private closedError: unknown;

  /** The session closed: an effect still running (a model call that ignored its signal) commits nothing more. */
  close(error: unknown): void {
    this.closedError ??= error;
  }

  /** The committed surface events (surfaceOp not `none`) from `fromSeq` on, read back from the log. */
  async committedSurface(fromSeq: number): Promise<EventRecord[]> {
    const out: EventRecord[] = [];
    for await (const e of this.store.readEvents(this.sessionId, { fromSeq, toSeq: this.nextSeq - 1 }))
      if (e.surfaceOp !== 'none') out.push(e);
    return out;
  }

  /**
   * Looks at the session's current writer epoch (one read, no write): true if another writer has
   * taken over, after which every commit fails. Called before every tool starts.
   */
  async checkFenced(): Promise<boolean> {
    const now = this.fencedNow();
    if (now !== undefined) return now;
    // calls starting together (one wave of a batch) share one read
    await (this.fenceRead ??= this.readFence().finally(() => (this.fenceRead = undefined)));
    // the lease may have run out while the head was read (a paused process): asked again
    return this.guarded();
  }

  /**
   * The fence check with no `await`, where the store reads the writer epoch synchronously
   * (`EventStore.writerEpochNow`: memory, LMDB); undefined where it cannot (then `checkFenced`).
   */
  fencedNow(): boolean | undefined {
    if (this.guarded()) return true;
    if (!this.store.writerEpochNow) return undefined;
    this.fenceAt(this.store.writerEpochNow(this.sessionId));
    return this.fencedError !== undefined;
  }

  /** The session's current writer epoch, as read: another one fences this writer. */
  private fenceAt(epoch: number | undefined): void {
    if (epoch !== undefined && epoch !== this.writerEpoch)
      this.fencedError ??= new StaleWriterError(this.sessionId, this.writerEpoch, epoch);
  }

  private fenceRead: Promise<void> | undefined;

  private async readFence(): Promise<void> {
    this.fenceAt((await this.store.getHead(this.sessionId))?.writerEpoch);
  }

  /**
   * The last check right before a side effect (a tool's start, a delivery), asked after the last
   * `await` on the path to it (a check before an await is stale after it): not fenced (the
   * session's writer epoch read again where the store reads it synchronously: memory, LMDB), its
   * lease (`guard`) still held, not closed. Synchronous.
   */
  mayStartEffect(): boolean {
    return this.fencedNow() !== true && this.closedError === undefined;
  }

  /** Why this writer may start no effect (fenced, lease lost, closed), or undefined while it may: `mayStartEffect`'s reason. */
  effectRefusal(): unknown {
    return this.mayStartEffect() ? undefined : (this.fencedError ?? this.closedError);
  }

  get lastSeq(): number {
    return this.nextSeq - 1;
  }

  /** Stages one event for the next commit point. */
  stage<T extends EventType>(type: T, at: { turn: number; step: number; attempt: number }, payload: PayloadOf<T>, eventId?: string): void {
    this.staged.push(this.draft(type, at, payload, eventId));
  }

  get hasStaged(): boolean {
    return this.staged.length > 0;
  }

  /** What is staged for the next commit point, in order. */
  get stagedDrafts(): readonly EventDraft[] {
    return this.staged;
  }

  /** Drops the staged drafts of the given types (a request a settling run will never wait on). */
  unstage(types: ReadonlySet<string>): void {
    this.staged = this.staged.filter((d) => !types.has(d.type));
  }

  /** Discards staged drafts (after a failed commit that will not be retried). */
  discard(): void {
    this.staged = [];
  }

  /**
   * Appends everything staged as one all-or-nothing batch; resolves once it is durable. With
   * `keepOnFailure` (drafts that answer effects already done: tool results), a failed append
   * while the writer can still write (not fenced, not closed) leaves them staged, ahead of anything
   * staged since, so the run's closing commit writes them with its run/end — a tool that ran is
   * never left without its result on a settled run.
   */
  commit(options: { keepOnFailure?: boolean } = {}): Promise<EventRecord[]> {
    // after a commit under way (commitAhead) has settled: what a failed one put back goes first
    if (this.ahead && !this.ahead.failure) return this.ahead.settled.then(() => this.commit(options));
    this.ahead = undefined;
    return this.commitNow(options.keepOnFailure === true);
  }

  private commitNow(keepOnFailure: boolean, onApplied?: () => void): Promise<EventRecord[]> {
    const drafts = this.staged;
    this.staged = [];
    const done = this.enqueue(drafts, onApplied);
    if (!keepOnFailure) return done;
    return done.catch((e: unknown) => {
      if (this.fencedError === undefined && this.closedError === undefined) this.staged = [...drafts, ...this.staged];
      throw e;
    });
  }

  private ahead: Ahead | undefined;

  /**
   * Commits what is staged as `commit({ keepOnFailure: true })` does, without waiting for it to
   * land: the step's results commit, which runs under the next model call (DESIGN §4, docs/
   * architecture.md "Pipelined results commit"). Until it lands, `pendingMessages` are the surface
   * messages it adds (the next request is built over them), `commit` waits for it, and `landed()`
   * tells its outcome. Resolves once the append is under way; a draft that does not validate is
   * committed the ordinary way instead, failing as it always did.
   */
  async commitAhead(): Promise<void> {
    if (this.ahead) await this.ahead.settled;
    this.ahead = undefined; // a failed one put its drafts back ahead of these
    const pending = this.pendingOf(this.staged);
    if (!pending) {
      await this.commitNow(true);
      return;
    }
    const entry: Ahead = { ...pending, done: LANDED, settled: LANDED };
    const landedOrPutBack = () => {
      entry.messages = [];
      entry.tokens = 0;
    };
    entry.done = this.commitNow(true, landedOrPutBack);
    entry.settled = entry.done.then(
      () => {
        if (this.ahead === entry) this.ahead = undefined;
      },
      (error: unknown) => {
        // kept: every way on learns of it (landed() rejects, aheadFailure) until a commit writes the results it put back
        entry.failure = { error };
        landedOrPutBack();
      },
    );
    this.ahead = entry;
  }

  /**
   * The surface messages `drafts` add, prepared as the store will (prepareAhead); undefined when
   * one does not validate or begins a new epoch (which replaces the surface: nothing to build over).
   */
  private pendingOf(drafts: readonly EventDraft[]): { messages: Message[]; tokens: number } | undefined {
    let prepared;
    try {
      prepared = prepareAhead(drafts, 'append', this.sessionId);
    } catch {
      return undefined;
    }
    const messages: Message[] = [];
    let tokens = 0;
    for (const d of prepared) {
      if (d.surfaceOp === 'epoch') return undefined;
      for (const m of surfaceMessages(d)) {
        messages.push(m);
        tokens += estimateTokens(m);
      }
    }
    return { messages, tokens };
  }

  /** The error of a commitAhead that failed, until the next commit writes what it put back. */
  get aheadFailure(): { error: unknown } | undefined {
    return this.ahead?.failure;
  }

  /** The surface messages of a commit under way (commitAhead), in order; empty once it landed. */
  get pendingMessages(): readonly Message[] {
    return this.ahead?.messages ?? [];
  }

  /** The token estimate of `pendingMessages`. */
  get pendingTokens(): number {
    return this.ahead?.tokens ?? 0;
  }

  /** Resolves once a commit made with commitAhead has landed (at once if none is under way); rejects with its error if it failed. */
  landed(): Promise<void> {
    return this.landing() ?? LANDED;
  }

  /** landed(), or undefined when no commitAhead is under way or unreported. */
  landing(): Promise<void> | undefined {
    const a = this.ahead;
    return a ? a.done.then(() => undefined) : undefined;
  }

  /**
   * Appends `drafts` on their own (an input, a steering receipt), without what a run has staged:
   * serialised with the run's commits, never mixed into its commit points.
   */
  appendNow(drafts: EventDraft[]): Promise<EventRecord[]> {
    return this.enqueue(drafts);
  }

  /**
   * Settles an append in doubt (its answer lost, the log unreadable then), writing nothing: found in
   * the log, the writer stops (LogDivergedError, thrown) as the next append would; not there, it is
   * forgotten. For a caller about to trust the log over what the session remembers.
   */
  async settleDoubt(): Promise<void> {
    if (this.inDoubt !== undefined) await this.enqueue([]);
  }

  /** Builds a draft with the type's surface op. */
  draft<T extends EventType>(
    type: T,
    at: { turn: number; step: number; attempt: number },
    payload: PayloadOf<T>,
    eventId?: string,
  ): EventDraft {
    const d: EventDraft = {
      type,
      turn: at.turn,
      step: at.step,
      attempt: at.attempt,
      surfaceOp: SURFACE_OPS[type],
      payload: payload as Record<string, unknown>,
    };
    const id = eventId ?? this.options.eventId?.();
    if (id) d.eventId = id;
    return d;
  }

  private tail: Promise<unknown> = Promise.resolve();

  /** Resolves when every append already asked for has settled (committed or failed). */
  settled(): Promise<void> {
    return this.tail.then(() => undefined);
  }

  private enqueue(drafts: EventDraft[], onApplied?: () => void): Promise<EventRecord[]> {
    const run = async (): Promise<EventRecord[]> => {
      if (this.guarded()) throw this.fencedError;
      if (this.closedError !== undefined) throw this.closedError;
      if (this.inDoubt) {
        const landed = await this.outcomeOf(this.inDoubt); // unreadable: still in doubt, nothing written
        this.inDoubt = undefined;
        // landed after its caller was told it failed: the session acted on a log it does not have
        // (a run failed over intents that are committed), so the writer stops; a reopen recovers
        if (landed)
          this.fencedError ??= new LogDivergedError(this.sessionId, this.writerEpoch, landed[0]!.seq, landed.at(-1)!.seq, LANDED_LATE);
        // asked again after the reads: the last await before the write
        if (this.guarded()) throw this.fencedError;
        if (this.closedError !== undefined) throw this.closedError;
      }
      if (drafts.length === 0) return [];
      try {
        return this.applied(await this.store.append(this.sessionId, this.writerEpoch, this.nextSeq, drafts), onApplied);
      } catch (e) {
        if (isStaleWriterError(e)) this.fencedError = e;
        else if (isSequenceConflictError(e) || !provesNotWritten(e)) {
          // the log says what became of it; when it cannot be read now, the next write reads it first
          if (!isSequenceConflictError(e)) this.inDoubt = drafts;
          const landed = await this.outcomeOf(drafts).catch((r: unknown) => {
            throw r === this.fencedError ? r : e;
          });
          this.inDoubt = undefined;
          if (landed) return this.applied(landed, onApplied);
        }
        throw e;
      }
    };
    const p = this.tail.then(run, run);
    this.tail = p.catch(() => undefined);
    return p;
  }

  /** Applies an append's records (projection, `onApplied`, the commit listener) and moves the tail past them. */
  private applied(records: EventRecord[], onApplied?: () => void): EventRecord[] {
    // an idempotent retry returns the events already stored (at earlier seqs): the tail stays
    const last = records.at(-1);
    if (last === undefined || last.seq < this.nextSeq) return records;
    this.nextSeq = last.seq + 1;
    this.projection.apply(records);
    onApplied?.();
    this.options.onCommitted?.(records);
    return records;
  }

  /** An append that failed without proving it unwritten, whose outcome the log could not tell yet. */
  private inDoubt: EventDraft[] | undefined;

  /**
   * What became of the append of `drafts` at the tail, read from the log (readAppendOutcome): its
   * records, or undefined when nothing of it is stored. Fences the writer (and throws) when another
   * writer took over or the log holds records it did not write (LogDivergedError); a read failure
   * is thrown as it is.
   */
  private async outcomeOf(drafts: readonly EventDraft[]): Promise<EventRecord[] | undefined> {
    let outcome;
    try {
      outcome = await readAppendOutcome(this.store, this.sessionId, this.writerEpoch, this.nextSeq, drafts);
    } catch (e) {
      if (isLogDivergedError(e)) this.fencedError ??= e;
      throw e;
    }
    if (outcome.kind === 'fenced') this.fencedError ??= outcome.error;
    if (this.fencedError !== undefined) throw this.fencedError;
    if (outcome.kind !== 'landed') return undefined;
    return outcome.records;
  }
}
