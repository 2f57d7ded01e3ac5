import { Observable } from 'rxjs';
import { isStoreUnavailableError } from '../../contracts/errors.js';
import type { EventRecord } from '../../contracts/events.js';
import type { ReadRange } from '../event-store.js';
import type { PgPoolClient } from './pg-types.js';
import { ident } from './schema.js';

/**
 * `events$` across processes. Each follower reads `seq >= cursor` from the table, then sleeps
 * until something wakes it: an append through this store, a NOTIFY from any process (the append
 * statement sends one on commit), a reconnect of the LISTEN connection (notifications may have
 * been missed while it was down), or the poll interval. A wake-up only makes the follower read
 * again, so a lost notification delays an event, never loses it; a read that fails for want of the
 * server (StoreUnavailableError) is tried again after a backoff (50 ms doubling, at most
 * `min(pollMs, 2 s)`), so a dropped connection delays the follower, never ends it.
 */
export class PgTail {
  private readonly wakers = new Map<string, Set<() => void>>();
  private readonly completers = new Set<() => void>();
  private listen: { client: PgPoolClient; release: () => void } | undefined;
  private listening: Promise<void> | undefined;
  private closed = false;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly connect: () => Promise<{ client: PgPoolClient; release: () => void }>,
    private readonly channel: string,
    private readonly pollMs: number,
  ) {}

  /** Wakes the followers of `sessionId` (an append through this store committed). */
  wake(sessionId: string): void {
    for (const w of this.wakers.get(sessionId) ?? []) w();
  }

  private wakeAll(): void {
    for (const set of this.wakers.values()) for (const w of set) w();
  }

  /** Starts LISTEN once (and again after its connection broke); resolves when it is in place or failed. */
  private ensureListening(): Promise<void> {
    if (this.closed || this.listen) return Promise.resolve();
    return (this.listening ??= (async () => {
      try {
        const conn = await this.connect();
        if (this.closed) return conn.release();
        conn.client.on('notification', (msg) => {
          if (msg.channel === this.channel && msg.payload !== undefined) this.wake(msg.payload);
        });
        conn.client.on('error', () => this.lost(conn));
        await conn.client.query(`LISTEN ${ident(this.channel)}`);
        this.listen = conn;
        this.wakeAll(); // anything appended while no LISTEN was in place is read now
      } catch {
        this.retryTimer = setTimeout(() => void this.ensureListening(), Math.min(this.pollMs, 1000));
      } finally {
        this.listening = undefined;
      }
    })());
  }

  private lost(conn: { release: () => void }): void {
    if (this.listen?.release === conn.release) this.listen = undefined;
    conn.release();
    if (!this.closed && this.wakers.size > 0) void this.ensureListening();
  }

  follow(sessionId: string, fromSeq: number, read: (range: ReadRange) => AsyncIterable<EventRecord>): Observable<EventRecord> {
    return new Observable<EventRecord>((subscriber) => {
      let next = fromSeq;
      let dirty = true;
      let wakeUp: (() => void) | undefined;
      const waker = () => {
        dirty = true;
        wakeUp?.();
      };
      const complete = () => {
        waker();
        subscriber.complete();
      };
      let set = this.wakers.get(sessionId);
      if (!set) this.wakers.set(sessionId, (set = new Set()));
      set.add(waker);
      this.completers.add(complete);
      let timer: NodeJS.Timeout | undefined;
      let failures = 0;
      (async () => {
        await this.ensureListening();
        while (!subscriber.closed && !this.closed) {
          if (!dirty) {
            await new Promise<void>((res) => {
              wakeUp = res;
              timer = setTimeout(() => {
                dirty = true; // the poll: read again even without a wake-up
                res();
              }, this.pollMs);
            });
            clearTimeout(timer);
            wakeUp = undefined;
            continue;
          }
          dirty = false;
          try {
            for await (const r of read({ fromSeq: next })) {
              if (subscriber.closed) return;
              if (r.seq !== next) throw new Error(`events$ gap in session ${sessionId}: expected seq ${next}, got ${r.seq}`);
              next = r.seq + 1;
              subscriber.next(r);
            }
            failures = 0;
          } catch (e) {
            // a read the server could not answer (a dropped connection, no free connection) is
            // tried again after a bounded backoff; a closed store or a damaged log ends the follower
            if (this.closed || !isStoreUnavailableError(e)) throw e;
            dirty = true;
            await new Promise<void>((res) => {
              wakeUp = res;
              timer = setTimeout(res, Math.min(this.pollMs, 50 * 2 ** failures++, 2000));
            });
            clearTimeout(timer);
            wakeUp = undefined;
            dirty = true; // a wake-up meanwhile must not skip the retry
          }
        }
      })().catch((e) => {
        if (!this.closed) subscriber.error(e);
      });
      return () => {
        clearTimeout(timer);
        wakeUp?.();
        set!.delete(waker);
        if (set!.size === 0) this.wakers.delete(sessionId);
        this.completers.delete(complete);
      };
    });
  }

  /** Completes every follower and ends the LISTEN connection. */
  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    for (const c of [...this.completers]) c();
    this.listen?.release();
    this.listen = undefined;
  }
}
