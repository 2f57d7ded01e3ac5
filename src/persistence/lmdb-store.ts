import type { WorkStore } from './work-store.js';
import { setImmediate as realSetImmediate } from 'node:timers';
import type { Database, RootDatabase } from 'lmdb';
import type { Observable } from 'rxjs';
import { z } from 'zod';
import { StoreClosedError } from '../contracts/errors.js';
import type { EventDraft, EventRecord } from '../contracts/events.js';
import { parseInput } from '../contracts/validate.js';
import { applyAppend, applyAttach } from './append-core.js';
import { findEvent, MAX_ID_KEY_BYTES, prepareDrafts, type PreparedDraft } from './codec.js';
import type { AttachResult, EventStore, ReadRange } from './event-store.js';
import { SessionHead } from './head.js';
import type { Journal, JournalState } from './journal.js';
import { readState, writeState, type LogDbs } from './journal-recovery.js';
import { guarded, storeFailure } from './lmdb-errors.js';
import { journaledPathError, openLmdbStore } from './lmdb-open.js';
import { decodeStored, LmdbTxn, readHead, readStoredRange, surfaceDecoder, type StoredDecoder } from './lmdb-txn.js';
import { LiveAppends } from './live.js';
import { chunksOf, epochTypeOf, SurfaceChunker, surfaceChunks } from './surface-chunks.js';
import type { StoredSurface } from './surface.js';
import { lmdbWork } from './lmdb-work.js';
import { LmdbHolders } from './lmdb-holders.js';
import type { KvWorkStore } from './work-kv.js';
import { assertAppendArgs, followFrom, assertEventId, assertSessionId, readRange } from './store-input.js';
import { checkedBlob, sha256Of, type BlobStore } from './blob-store.js';

export const LmdbStoreOptions = z.strictObject({
  /** Directory of the LMDB environment; created if missing (a path that is a file is a StoreError). */
  path: z
    .string()
    .min(1)
    .refine((p) => !p.includes('\0'), { error: (iss) => `${JSON.stringify(iss.input)} cannot be a path: it holds a NUL character` })
    .default('./.actorloop'),
  /**
   * `flushed` (default): an append resolves after its commit's journal frame is fsync'd — durable
   * against power loss. `committed`: no journal; a commit reaches the page cache only (it survives
   * a killed process, not a power cut or kernel crash); for benchmarks and throwaway data only.
   * A path with a journal refuses 'committed' (ValidationError).
   */
  durability: z.enum(['flushed', 'committed']).default('flushed'),
  /**
   * The machine's boot identity, which decides whether the LMDB file must be rebuilt from the
   * journal (docs/event-log.md). Defaults to the kernel's boot id; crash tests set it to
   * simulate a restart of the machine.
   */
  bootId: z.string().min(1).optional(),
  /** Events per page when reading; bounds the memory of `readEvents`. */
  readPageSize: z.number().int().positive().default(512),
});
export type LmdbStoreOptions = z.input<typeof LmdbStoreOptions>;

/**
 * The default EventStore: one LMDB environment (one file) holding every session's log, the
 * per-session head records and the event-id index. Appends from all sessions that are in flight
 * together share one write transaction and one disk flush (group commit).
 *
 * LMDB serialises writers across processes with one lock, so a process paused inside a write
 * transaction blocks every other writer of the file: transactions here are short and
 * synchronous, and nothing is awaited inside one.
 * @example
 * const store = lmdbStore({ path: './.actorloop' })
 */
export function lmdbStore(
  options: LmdbStoreOptions = {},
): EventStore &
  LmdbStats & { readonly work: WorkStore; readonly blobs: BlobStore; loadStoredSurface(sessionId: string): Promise<StoredSurface> } {
  return new LmdbEventStore(parseInput(LmdbStoreOptions, options, 'lmdbStore'));
}

/** Counters for benchmarks: how many write transactions (commit points) and flushes ran. */
export interface LmdbStats {
  /** Counters since open: commits, journal flushes, appends, and µs spent waiting in those flushes. */
  readonly stats: { commits: number; flushes: number; appends: number; flushMicros: number };
}

interface Op {
  run(txn: LmdbTxn): unknown;
  resolve(v: unknown): void;
  reject(e: unknown): void;
  result?: unknown;
  error?: unknown;
  publish?: EventRecord[];
}

class LmdbEventStore implements EventStore, LmdbStats {
  readonly stats = { commits: 0, flushes: 0, appends: 0, flushMicros: 0 };
  private readonly env: RootDatabase;
  private readonly dbs: LogDbs;
  private readonly events: Database<string, [string, number]>;
  private readonly heads: Database<string, string>;
  private readonly ids: Database<number, [string, string]>;
  /** The write-ahead journal ('flushed' mode), or null ('committed'). */
  private readonly journal: Journal | null;
  private readonly live = new LiveAppends();
  private readonly chunker = new SurfaceChunker();
  private queue: Op[] = [];
  private draining: Promise<void> | null = null;
  private closed = false;
  /** The inbox and leases (work-store.ts), in this file. */
  readonly work: KvWorkStore;
  /** The blobs (blob-store.ts): the `blobs` database, written through the write queue, so journaled like the records. */
  readonly blobs: BlobStore = {
    put: async (bytes) => {
      this.assertOpen();
      const sha256 = sha256Of(bytes);
      const ref = { sha256, size: bytes.length };
      if (await this.blobs.has(sha256)) return ref;
      const copy = Uint8Array.prototype.slice.call(bytes); // the caller may change its array while the write is queued
      await this.enqueue({ run: (txn) => txn.putBlob(sha256, copy) });
      return ref;
    },
    get: async (sha256) => {
      this.assertOpen();
      const raw = guarded({ path: this.options.path }, () => this.dbs.blobs!.get(sha256));
      return raw === undefined ? undefined : checkedBlob(sha256, new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength));
    },
    has: async (sha256) => {
      this.assertOpen();
      return guarded({ path: this.options.path }, () => this.dbs.blobs!.doesExist(sha256));
    },
  };
  /** The live holder of each session (holders.ts, lmdb-holders.ts). */
  readonly holders: LmdbHolders;

  constructor(private readonly options: z.output<typeof LmdbStoreOptions>) {
    const opened = openLmdbStore(options.path, options.durability, options.bootId);
    this.dbs = opened.dbs;
    this.journal = opened.journal;
    this.env = this.dbs.env;
    this.events = this.dbs.events;
    this.heads = this.dbs.heads;
    this.ids = this.dbs.ids;
    this.work = lmdbWork(
      { env: this.env, inbox: this.dbs.inbox!, work: this.dbs.work!, workers: this.dbs.workers! },
      {
        write: (run) => this.enqueue({ run }),
        head: (txn, sid) => (txn ? txn.head(sid) : readHead(this.heads, sid, this.options.path)),
        hasEvent: (txn, sid, id) => (txn ? txn.seqOfEventId(sid, id) : this.ids.get([sid, id])) !== undefined,
        assertOpen: () => this.assertOpen(),
      },
    );
    this.holders = new LmdbHolders(this.env, this.dbs.holders!, () => this.assertOpen());
  }

  async attachWriter(sessionId: string): Promise<AttachResult> {
    this.assertOpen();
    assertSessionId(sessionId, 'attachWriter');
    return this.enqueue<AttachResult>({ run: (txn) => applyAttach(txn, sessionId) });
  }

  async append(sessionId: string, writerEpoch: number, expectedSeq: number, drafts: readonly EventDraft[]): Promise<EventRecord[]> {
    this.assertOpen();
    assertAppendArgs(sessionId, writerEpoch, expectedSeq);
    const prepared: PreparedDraft[] = prepareDrafts(drafts, 'append', sessionId);
    const op: Op = {
      run: (txn) => {
        const out = applyAppend(txn, sessionId, writerEpoch, expectedSeq, prepared, new Date().toISOString());
        if (out.written) {
          op.publish = out.records;
          this.chunker.afterAppend(txn, sessionId, out.before, out.records);
        }
        return out.records;
      },
      resolve: () => {},
      reject: () => {},
    };
    return this.enqueue<EventRecord[]>(op).then((records) => {
      if (op.publish) this.live.publish(sessionId, op.publish);
      return records;
    });
  }

  private enqueue<T>(partial: Pick<Op, 'run'> & Partial<Op>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const op = partial as Op;
      op.resolve = resolve as (v: unknown) => void;
      op.reject = reject;
      this.queue.push(op);
      if (!this.draining) this.draining = this.drain();
    });
  }

  /** Group commit: everything queued while the previous flush ran goes into one transaction. */
  private async drain(): Promise<void> {
    // one turn of the event loop: appends that I/O callbacks ready in this poll phase issue (other
    // sessions answered by their model meanwhile) join this batch and share its flush
    // (node:timers' own setImmediate: fake timers in an app's tests replace the global one)
    await new Promise<void>((resolve) => realSetImmediate(resolve));
    try {
      while (this.queue.length > 0) {
        const ops = this.queue;
        this.queue = [];
        let fatal: unknown;
        let framed: JournalState | undefined;
        let after: JournalState | undefined;
        try {
          const txn = new LmdbTxn(this.dbs, this.journal !== null, this.options.path);
          this.env.transactionSync(() => {
            for (const op of ops) {
              txn.dirty = false;
              try {
                op.result = op.run(txn);
              } catch (e) {
                if (txn.dirty) throw e; // a half-written op: abort the whole transaction
                op.error = e;
              }
            }
            if (!this.journal) {
              // A 'committed' store opened before another process gave the path a journal.
              if (this.dbs.journal.get('state') !== undefined) throw journaledPathError(this.options.path);
            } else if (txn.frame!.size > 0) {
              // Last thing in the transaction: the frame is flushed before LMDB commits.
              const { at, next, flushMicros } = this.journal.write(readState(this.dbs, this.options.path), txn.frame!.payload());
              framed = at;
              after = next;
              writeState(this.dbs, next);
              this.stats.flushes++;
              this.stats.flushMicros += flushMicros;
            }
          });
          this.stats.commits++;
          this.stats.appends += ops.length;
          if (after) this.journal!.prepareNext(after);
        } catch (e) {
          fatal = storeFailure(e, { path: this.options.path, op: 'write' });
          this.chunker.clear(); // it followed appends this transaction did not store
          if (framed) this.invalidate(framed);
        }
        for (const op of ops) {
          if (fatal !== undefined) op.reject(fatal);
          else if (op.error !== undefined) op.reject(op.error);
          else op.resolve(op.result);
        }
      }
    } finally {
      this.draining = null;
    }
  }

  /**
   * After a transaction that wrote a frame failed to commit: its callers are told it failed, so
   * the frame must not come back in a rebuild. Under the writer lock again, and only if no
   * commit (of any process) has taken its place meanwhile, its header is overwritten.
   */
  private invalidate(at: JournalState): void {
    try {
      this.env.transactionSync(() => {
        if (readState(this.dbs, this.options.path).nextFrame === at.nextFrame) this.journal!.invalidate(at);
      });
    } catch {
      // the next commit writes its own frame N over it anyway
    }
  }

  async *readEvents(sessionId: string, range: ReadRange = {}): AsyncIterable<EventRecord> {
    this.assertOpen();
    const { fromSeq, toSeq } = readRange(sessionId, range);
    // records up to the head's lastSeq must exist: a log shorter than its head is corrupt
    const lastSeq = readHead(this.heads, sessionId, this.options.path)?.lastSeq ?? 0;
    yield* this.stored(sessionId, fromSeq, toSeq, lastSeq, decodeStored);
  }

  async loadSurface(sessionId: string): Promise<EventRecord[]> {
    const head = await this.getHead(sessionId);
    return head ? this.surfaceFrom(sessionId, head.surfaceStartSeq, head.lastSeq) : [];
  }

  /** The surface as opening a session reads it: the stored chunks that tile it from its start, then the records after them. */
  async loadStoredSurface(sessionId: string): Promise<StoredSurface> {
    const head = await this.getHead(sessionId);
    if (!head) return { chunks: [], records: [] };
    const range = { start: [sessionId, head.surfaceStartSeq] as [string, number], end: [sessionId, head.lastSeq + 1] as [string, number] };
    const { chunks, nextSeq } = guarded({ path: this.options.path, sessionId, seq: head.surfaceStartSeq }, () =>
      surfaceChunks(sessionId, head, this.dbs.surface!.getRange(range)),
    );
    const records = await this.surfaceFrom(sessionId, nextSeq, head.lastSeq);
    this.writeBack(sessionId, head, nextSeq, records, chunks[0]?.epochType ?? epochTypeOf(records[0], head));
    return { chunks, records };
  }

  /** The surface events from `fromSeq` to the head's `lastSeq`. */
  private async surfaceFrom(sessionId: string, fromSeq: number, lastSeq: number): Promise<EventRecord[]> {
    const out: EventRecord[] = [];
    for await (const e of this.stored(sessionId, fromSeq, lastSeq, lastSeq, surfaceDecoder(sessionId))) out.push(e);
    return out;
  }

  /**
   * Writes the chunks of the complete buckets whose records an open read (`records`, from
   * `fromSeq`), in a transaction of its own (no journal frame, no flush), while the surface is
   * still the one read. A cache: any failure (a bucket too large for one string, a full map) is
   * ignored, and the next open reads the records.
   */
  private writeBack(
    sessionId: string,
    head: SessionHead,
    fromSeq: number,
    records: readonly EventRecord[],
    epochType: string | null,
  ): void {
    if (this.closed) return;
    try {
      const chunks = chunksOf(sessionId, head, fromSeq, records, epochType);
      if (chunks.length === 0) return;
      this.env.transactionSync(() => {
        if (readHead(this.heads, sessionId, this.options.path)?.surfaceStartSeq !== head.surfaceStartSeq) return;
        for (const [seq, stored] of chunks) this.dbs.surface!.putSync([sessionId, seq], stored);
      });
    } catch {
      // left to the next open
    }
  }

  /** The records `fromSeq..toSeq` in pages, each decoded by `decode` (undefined: skipped); those up to `lastSeq` must exist. */
  private async *stored(
    sessionId: string,
    fromSeq: number,
    toSeq: number,
    lastSeq: number,
    decode: StoredDecoder,
  ): AsyncIterable<EventRecord> {
    const page = this.options.readPageSize;
    const mustExist = Math.min(toSeq, lastSeq);
    let next = fromSeq;
    while (next <= toSeq) {
      const end = Math.min(toSeq, next + page - 1);
      const read = readStoredRange(this.events, this.options.path, sessionId, next, end, mustExist, decode);
      next = read.next;
      for (const e of read.records) yield e;
      if (next <= end) return; // the log ends inside this page
      // closed mid-read: an error, never a silently shorter log
      if (this.closed)
        throw new StoreClosedError(`LMDB store at ${this.options.path} (closed while ${sessionId} was read; stopped before seq ${next})`);
    }
  }

  async getHead(sessionId: string): Promise<SessionHead | undefined> {
    this.assertOpen();
    assertSessionId(sessionId, 'getHead');
    // lmdb-js reuses one read snapshot within an event turn; the head must be current (fencing
    // checks read it to see another process's attach).
    this.env.resetReadTxn();
    return readHead(this.heads, sessionId, this.options.path);
  }

  writerEpochNow(sessionId: string): number | undefined {
    this.assertOpen();
    this.env.resetReadTxn(); // current, as getHead's
    return readHead(this.heads, sessionId, this.options.path)?.writerEpoch;
  }

  async getEventById(sessionId: string, eventId: string): Promise<EventRecord | undefined> {
    this.assertOpen();
    assertSessionId(sessionId, 'getEventById');
    assertEventId(eventId, 'getEventById');
    if (Buffer.byteLength(sessionId) + Buffer.byteLength(eventId) > MAX_ID_KEY_BYTES) return undefined; // never storable
    return findEvent(
      eventId,
      (id) => guarded({ path: this.options.path, sessionId, seq: 0 }, () => this.ids.get([sessionId, id]) as number | undefined),
      (n, indexed) => {
        const raw = guarded({ path: this.options.path, sessionId, seq: n }, () => this.events.get([sessionId, n]));
        return raw === undefined && !indexed ? undefined : decodeStored(sessionId, n, raw);
      },
    );
  }

  async listSessions(): Promise<string[]> {
    this.assertOpen();
    return guarded({ path: this.options.path }, () => [...this.heads.getKeys()].map(String));
  }

  events$(sessionId: string, options?: { fromSeq?: number }): Observable<EventRecord> {
    return this.live.follow(sessionId, followFrom(sessionId, options), (r) => this.readEvents(sessionId, r));
  }

  private closing?: Promise<void>;

  /** Waits for the appends queued before it; every call resolves only once the store is closed. */
  close(): Promise<void> {
    return (this.closing ??= this.closeOnce());
  }

  private async closeOnce(): Promise<void> {
    this.closed = true;
    while (this.draining) await this.draining;
    this.live.complete();
    this.work.complete();
    await this.journal?.settle();
    this.journal?.close();
    await this.env.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreClosedError(`LMDB store at ${this.options.path}`);
  }
}
