import type { WorkStore } from './work-store.js';
import type { Observable } from 'rxjs';
import { z } from 'zod';
import { StoreClosedError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import type { EventDraft, EventRecord } from '../contracts/events.js';
import { applyAppend, applyAttach, type LogTxn } from './append-core.js';
import { findEvent, prepareDrafts } from './codec.js';
import type { AttachResult, EventStore, ReadRange } from './event-store.js';
import type { SessionHead } from './head.js';
import { LiveAppends } from './live.js';
import { assertAppendArgs, followFrom, assertEventId, assertSessionId, readRange, surfaceOf } from './store-input.js';
import { memoryWork } from './memory-work.js';
import { MemoryBlobs, type BlobStore } from './blob-store.js';
import type { KvWorkStore } from './work-kv.js';

/** Stages writes; they reach the maps only when the whole operation succeeded (all or nothing). */
class MemoryTxn implements LogTxn {
  readonly heads = new Map<string, SessionHead>();
  readonly events: { sessionId: string; text: string }[] = [];
  readonly ids: [string, string, number][] = [];
  constructor(private readonly sessions: Map<string, SessionData>) {}
  head(sid: string) {
    return this.heads.get(sid) ?? this.sessions.get(sid)?.head;
  }
  seqOfEventId(sid: string, id: string) {
    return this.sessions.get(sid)?.ids.get(id);
  }
  event(sid: string, seq: number) {
    return JSON.parse(this.sessions.get(sid)!.events[seq - 1]!) as EventRecord;
  }
  putHead(h: SessionHead) {
    this.heads.set(h.sessionId, h);
  }
  putEvent(r: EventRecord, text: string) {
    this.events.push({ sessionId: r.sessionId, text: flat(text) });
  }
  putEventId(sid: string, id: string, seq: number) {
    this.ids.push([sid, id, seq]);
  }
}

/**
 * `text` as one flat string. A record's text is built by concatenation (encodeRecord), which V8
 * keeps as a rope of its parts: 2–3 times the flat size, kept for as long as the store keeps the
 * record. Reading a character flattens it in place (V8's String::Flatten).
 */
function flat(text: string): string {
  void text.charCodeAt(0);
  return text;
}

interface SessionData {
  head: SessionHead;
  /** Records as JSON text, like the LMDB store: nothing stored is shared with a caller. */
  events: string[];
  ids: Map<string, number>;
}

/**
 * An in-memory EventStore with exactly the LMDB store's semantics (same append algorithm),
 * minus durability. For tests and throwaway agents.
 * @example
 * const runtime = createRuntime({ store: memoryStore(), model })
 */
export function memoryStore(options?: Record<string, never>): EventStore & { readonly work: WorkStore; readonly blobs: BlobStore } {
  // it takes no options: anything given (a typo'd lmdbStore option, say) is refused, not ignored
  parseInput(z.strictObject({}).optional(), options, 'memoryStore');
  return new MemoryEventStore();
}

class MemoryEventStore implements EventStore {
  private readonly sessions = new Map<string, SessionData>();
  private readonly live = new LiveAppends();
  private closed = false;
  /** The inbox and leases (work-store.ts). */
  readonly work: KvWorkStore = memoryWork({
    writerEpoch: (sid) => this.sessions.get(sid)?.head.writerEpoch ?? 0,
    hasEvent: (sid, id) => this.sessions.get(sid)?.ids.has(id) ?? false,
    assertOpen: () => this.assertOpen(),
  });
  /** The blobs (blob-store.ts). */
  readonly blobs = new MemoryBlobs(() => this.assertOpen());

  private txn(): MemoryTxn {
    return new MemoryTxn(this.sessions);
  }

  async attachWriter(sessionId: string): Promise<AttachResult> {
    this.assertOpen();
    assertSessionId(sessionId, 'attachWriter');
    const t = this.txn();
    const res = applyAttach(t, sessionId);
    this.commit(t);
    return res;
  }

  async append(sessionId: string, writerEpoch: number, expectedSeq: number, drafts: readonly EventDraft[]): Promise<EventRecord[]> {
    this.assertOpen();
    assertAppendArgs(sessionId, writerEpoch, expectedSeq);
    const prepared = prepareDrafts(drafts, 'append', sessionId);
    const t = this.txn();
    const { records, written } = applyAppend(t, sessionId, writerEpoch, expectedSeq, prepared, new Date().toISOString());
    this.commit(t);
    if (written) this.live.publish(sessionId, records);
    return records; // built fresh by applyAppend; the store keeps its own JSON copy
  }

  private commit(t: MemoryTxn): void {
    for (const [sid, head] of t.heads) {
      const cur = this.sessions.get(sid);
      if (cur) cur.head = head;
      else this.sessions.set(sid, { head, events: [], ids: new Map() });
    }
    for (const e of t.events) this.sessions.get(e.sessionId)!.events.push(e.text);
    for (const [sid, id, seq] of t.ids) this.sessions.get(sid)!.ids.set(id, seq);
  }

  async *readEvents(sessionId: string, range: ReadRange = {}): AsyncIterable<EventRecord> {
    this.assertOpen();
    const { fromSeq, toSeq } = readRange(sessionId, range);
    const s = this.sessions.get(sessionId);
    if (!s) return;
    for (let seq = fromSeq; seq <= Math.min(toSeq, s.events.length); seq++) {
      // closed mid-read: an error, never a silently shorter (or longer) log — as the LMDB store
      if (this.closed) throw new StoreClosedError(`memory store (closed while ${sessionId} was read; stopped before seq ${seq})`);
      yield JSON.parse(s.events[seq - 1]!) as EventRecord;
    }
  }

  async loadSurface(sessionId: string): Promise<EventRecord[]> {
    return surfaceOf(this, sessionId);
  }

  async getHead(sessionId: string): Promise<SessionHead | undefined> {
    this.assertOpen();
    assertSessionId(sessionId, 'getHead');
    const h = this.sessions.get(sessionId)?.head;
    return h && structuredClone(h); // nothing stored is shared with a caller (like LMDB's fresh decode)
  }

  writerEpochNow(sessionId: string): number | undefined {
    this.assertOpen();
    return this.sessions.get(sessionId)?.head.writerEpoch;
  }

  async getEventById(sessionId: string, eventId: string): Promise<EventRecord | undefined> {
    this.assertOpen();
    assertSessionId(sessionId, 'getEventById');
    assertEventId(eventId, 'getEventById');
    const s = this.sessions.get(sessionId);
    if (!s) return undefined;
    return findEvent(
      eventId,
      (id) => s.ids.get(id),
      (n, indexed) => (s.events[n - 1] === undefined && !indexed ? undefined : (JSON.parse(s.events[n - 1]!) as EventRecord)),
    );
  }

  async listSessions(): Promise<string[]> {
    this.assertOpen();
    return [...this.sessions.keys()].sort();
  }

  events$(sessionId: string, options?: { fromSeq?: number }): Observable<EventRecord> {
    return this.live.follow(sessionId, followFrom(sessionId, options), (r) => this.readEvents(sessionId, r));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.live.complete();
    this.work.complete();
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreClosedError('memory store');
  }
}
