import type { EventRecord } from '../contracts/events.js';
import type { Message } from '../contracts/message.js';
import { seal, unseal } from './checksum.js';
import type { SessionHead } from './head.js';
import { surfaceMessages, type SurfaceChunk } from './surface.js';

/**
 * Surface chunks: the LMDB store's copy of a session's surface in the form opening a session
 * needs it — the model-visible messages, as JSON — so that an open reads a few large values
 * instead of every record since the surface epoch (most of which, calls and step markers, are
 * not on the surface). docs/event-log.md, "Surface chunks".
 *
 * - A chunk covers the seqs of one bucket of CHUNK_SEQS (`1..1024`, `1025..2048`, …), or the
 *   part of it from a surface epoch on, and is written in the write transaction of the append
 *   that completes the bucket, from the same records. The surface after the last chunk is read
 *   from the records.
 * - Chunks are a cache of the records, never the truth: they are not journaled (a rebuild from
 *   the journal has none), and a chunk that fails its checksum or does not fit the head is not
 *   used (open reads the records from there on; `verify` reports it). An open that read a
 *   complete bucket's records writes its chunk back (chunksOf).
 * - To complete a bucket without reading it back, the store keeps a session's open bucket in
 *   memory once the session has reached a quarter of it (read back once, then followed append by
 *   append; at most MAX_PENDING_BYTES and MAX_PENDING_SESSIONS over all sessions, least recently
 *   appended dropped first), so a short session is never held. A bucket it does not hold is read
 *   back when it completes. A failed transaction forgets every open bucket (clear), and an append
 *   of another writer epoch than the one followed drops the session's.
 * - A new surface epoch removes the session's older chunks (never read again).
 */

export const CHUNK_SEQS = 1024;
/** Where in a bucket the store starts keeping a session's open bucket in memory. */
const FOLLOW_FROM = CHUNK_SEQS / 4;
const MAX_PENDING_BYTES = 8 * 1024 * 1024;
const MAX_PENDING_SESSIONS = 4096;
const FORMAT = 1;

/** What the chunker needs of the write transaction it runs in. */
export interface ChunkIo {
  /** The surface events (surfaceOp not `none`) of seqs `fromSeq..toSeq`, checked and decoded. */
  surfaceRecords(sessionId: string, fromSeq: number, toSeq: number): EventRecord[];
  event(sessionId: string, seq: number): EventRecord;
  putSurfaceChunk(sessionId: string, fromSeq: number, stored: string): void;
  /** Removes the session's chunks that start before `beforeSeq`. */
  removeSurfaceChunks(sessionId: string, beforeSeq: number): void;
}

interface Pending {
  /** The writer epoch whose appends it followed: another epoch's append means another writer came between. */
  writerEpoch: number;
  fromSeq: number;
  /** Seq of the last record it has seen (surface or not). */
  throughSeq: number;
  epochSeq: number;
  epochType: string | null;
  lastSurfaceSeq: number;
  seqs: number[];
  parts: string[];
  bytes: number;
}

const fresh = (fromSeq: number, epochSeq: number, epochType: string | null, writerEpoch = 0): Pending => ({
  writerEpoch,
  fromSeq,
  throughSeq: fromSeq - 1,
  epochSeq,
  epochType,
  lastSurfaceSeq: 0,
  seqs: [],
  parts: [],
  bytes: 0,
});

function add(p: Pending, r: EventRecord): void {
  if (r.surfaceOp !== 'none') {
    for (const m of surfaceMessages(r)) {
      const json = JSON.stringify(m);
      p.parts.push(json);
      p.seqs.push(r.seq);
      p.bytes += 2 * json.length + 16; // UTF-16, and the seq
    }
    p.lastSurfaceSeq = r.seq;
  }
  p.throughSeq = r.seq;
}

/** Builds each session's chunks as its appends commit (one per store object). */
export class SurfaceChunker {
  private readonly pending = new Map<string, Pending>();
  private pendingBytes = 0;

  /**
   * Called in the write transaction of an append that stored `records` after `before`: writes the
   * chunk of every bucket the append completes. A failure to build one (a record it cannot read
   * back) writes no chunk and fails nothing: open reads those records instead.
   */
  afterAppend(io: ChunkIo, sessionId: string, before: SessionHead, records: readonly EventRecord[]): void {
    if (records.length === 0) return;
    const first = records[0]!;
    let p = this.take(sessionId);
    // another writer came between (it attached: a new epoch), or appends were lost with an aborted transaction
    if (p && (p.throughSeq !== first.seq - 1 || p.writerEpoch !== first.writerEpoch)) p = undefined;
    let epochSeq = before.surfaceStartSeq;
    const chunks: [number, string][] = [];
    try {
      for (const r of records) {
        if (r.surfaceOp === 'epoch') {
          epochSeq = r.seq;
          p = fresh(r.seq, r.seq, r.type);
          chunks.length = 0; // the previous epoch's: never read again
        }
        if (p) add(p, r);
        const at = r.seq % CHUNK_SEQS;
        // a session a quarter of the way through a bucket is followed from there (one read back);
        // a short session is never held in memory
        if (!p && at === FOLLOW_FROM) p = readBack(io, sessionId, Math.max(r.seq - at + 1, epochSeq), r.seq, epochSeq);
        if (at !== 0) continue;
        p ??= readBack(io, sessionId, Math.max(r.seq - CHUNK_SEQS + 1, epochSeq), r.seq, epochSeq);
        chunks.push([p.fromSeq, seal(encodeChunk(sessionId, p))]);
        p = fresh(r.seq + 1, p.epochSeq, p.epochType);
      }
    } catch {
      p = undefined;
      chunks.length = 0;
    }
    // a new epoch removes the older chunks, whatever became of the chunks built above
    const lastEpoch = records.findLast((r) => r.surfaceOp === 'epoch');
    if (lastEpoch) io.removeSurfaceChunks(sessionId, lastEpoch.seq);
    for (const [fromSeq, stored] of chunks) io.putSurfaceChunk(sessionId, fromSeq, stored);
    if (p) {
      p.writerEpoch = first.writerEpoch;
      this.keep(sessionId, p);
    }
  }

  /** Forgets every session's open bucket: a transaction failed, and what it followed may not be stored. */
  clear(): void {
    this.pending.clear();
    this.pendingBytes = 0;
  }

  private take(sessionId: string): Pending | undefined {
    const p = this.pending.get(sessionId);
    if (p) {
      this.pending.delete(sessionId);
      this.pendingBytes -= p.bytes;
    }
    return p;
  }

  private keep(sessionId: string, p: Pending): void {
    this.pending.set(sessionId, p);
    this.pendingBytes += p.bytes;
    for (const [id, q] of this.pending) {
      if (this.pendingBytes <= MAX_PENDING_BYTES && this.pending.size <= MAX_PENDING_SESSIONS) break;
      this.pending.delete(id);
      this.pendingBytes -= q.bytes;
    }
  }
}

/** The bucket so far (`fromSeq..toSeq`, every record already stored) read back from the log. */
function readBack(io: ChunkIo, sessionId: string, fromSeq: number, toSeq: number, epochSeq: number): Pending {
  const records = io.surfaceRecords(sessionId, fromSeq, toSeq);
  const atEpoch = epochSeq >= fromSeq ? records.find((r) => r.seq === epochSeq) : io.event(sessionId, epochSeq);
  return bucket(fromSeq, toSeq, epochSeq, epochTypeAt(atEpoch), records);
}

/** The bucket `fromSeq..throughSeq` of the surface begun at `epochSeq`, made from its surface events. */
function bucket(fromSeq: number, throughSeq: number, epochSeq: number, epochType: string | null, records: readonly EventRecord[]): Pending {
  const p = fresh(fromSeq, epochSeq, epochType);
  for (const r of records) add(p, r);
  p.throughSeq = throughSeq;
  return p;
}

/** The type of `r` when it begins a surface epoch, else null. */
const epochTypeAt = (r: EventRecord | undefined): string | null => (r?.surfaceOp === 'epoch' ? r.type : null);

/**
 * The chunks of the complete buckets in `fromSeq..lastSeq` of the head's surface, made from its
 * surface events there (`records`, in order, as an open read them): an open that had to read a
 * bucket's records writes its chunk back (a store rebuilt from its journal, or written before
 * chunks, gets them on first open). `epochType`: the type of the event that began the surface.
 */
export function chunksOf(
  sessionId: string,
  head: SessionHead,
  fromSeq: number,
  records: readonly EventRecord[],
  epochType: string | null,
): [number, string][] {
  const out: [number, string][] = [];
  let i = 0;
  for (let from = fromSeq, end = Math.ceil(fromSeq / CHUNK_SEQS) * CHUNK_SEQS; end <= head.lastSeq; from = end + 1, end += CHUNK_SEQS) {
    let j = i;
    while (j < records.length && records[j]!.seq <= end) j++;
    out.push([from, seal(encodeChunk(sessionId, bucket(from, end, head.surfaceStartSeq, epochType, records.slice(i, j))))]);
    i = j;
  }
  return out;
}

/** The type of the event that began the head's surface, given the first surface event at or after its start (null: none did). */
export const epochTypeOf = (first: EventRecord | undefined, head: SessionHead): string | null =>
  epochTypeAt(first?.seq === head.surfaceStartSeq ? first : undefined);

/** A chunk's stored text: a header line (JSON), then its messages as one JSON array. */
function encodeChunk(sessionId: string, p: Pending): string {
  const header = {
    format: FORMAT,
    sessionId,
    fromSeq: p.fromSeq,
    toSeq: p.throughSeq,
    epochSeq: p.epochSeq,
    epochType: p.epochType,
    lastSurfaceSeq: p.lastSurfaceSeq,
    seqs: p.seqs,
  };
  return `${JSON.stringify(header)}\n[${p.parts.join(',')}]`;
}

/** A stored chunk checked (checksum, header) and decoded; undefined if it is damaged or not this session's chunk at `fromSeq`. */
export function decodeChunk(sessionId: string, fromSeq: number, stored: unknown): SurfaceChunk | undefined {
  try {
    if (typeof stored !== 'string' || stored.startsWith('{')) return undefined;
    const text = unseal(sessionId, fromSeq, stored) as string;
    const nl = text.indexOf('\n');
    const h = JSON.parse(text.slice(0, nl)) as Record<string, unknown>;
    const messagesText = text.slice(nl + 1);
    const messages = JSON.parse(messagesText) as Message[];
    const seqs = h.seqs as number[];
    const ok =
      nl > 0 &&
      h.format === FORMAT &&
      h.sessionId === sessionId &&
      h.fromSeq === fromSeq &&
      Number.isSafeInteger(h.toSeq) &&
      (h.toSeq as number) >= fromSeq &&
      Number.isSafeInteger(h.epochSeq) &&
      (h.epochType === null || typeof h.epochType === 'string') &&
      Number.isSafeInteger(h.lastSurfaceSeq) &&
      Array.isArray(seqs) &&
      Array.isArray(messages) &&
      seqs.length === messages.length;
    if (!ok) return undefined;
    return {
      fromSeq,
      toSeq: h.toSeq as number,
      epochSeq: h.epochSeq as number,
      epochType: h.epochType as string | null,
      lastSurfaceSeq: h.lastSurfaceSeq as number,
      seqs,
      messages,
      messagesText,
    };
  } catch {
    return undefined;
  }
}

/**
 * The chunks that tile the head's surface from its start, in order (`stored`: the session's chunks
 * from the surface's start on, by fromSeq), and the seq the records take over from: the first
 * chunk missing, damaged or not fitting ends the run of chunks.
 */
export function surfaceChunks(
  sessionId: string,
  head: SessionHead,
  stored: Iterable<{ key: [string, number]; value: unknown }>,
): { chunks: SurfaceChunk[]; nextSeq: number } {
  const chunks: SurfaceChunk[] = [];
  let nextSeq = head.surfaceStartSeq;
  for (const { key, value } of stored) {
    if (key[1] !== nextSeq) break;
    const c = decodeChunk(sessionId, nextSeq, value);
    if (!c || c.epochSeq !== head.surfaceStartSeq || c.toSeq > head.lastSeq) break;
    chunks.push(c);
    nextSeq = c.toSeq + 1;
  }
  return { chunks, nextSeq };
}

/**
 * What is wrong with the stored chunk at `fromSeq` (undefined: nothing): damaged, beyond the log's
 * end, or not the messages of the records it covers (`records(from, to)`: every record of the range).
 */
export function chunkMismatch(
  sessionId: string,
  fromSeq: number,
  stored: unknown,
  lastSeq: number,
  records: (fromSeq: number, toSeq: number) => EventRecord[],
): string | undefined {
  const c = decodeChunk(sessionId, fromSeq, stored);
  if (!c) return 'damaged (its checksum, header or messages do not read back)';
  if (c.toSeq > lastSeq) return `it covers seqs up to ${c.toSeq}, beyond the log's end (${lastSeq})`;
  let rs: EventRecord[];
  try {
    rs = records(fromSeq, c.toSeq);
  } catch {
    return undefined; // the records' own damage is reported with them
  }
  if (c.fromSeq < c.epochSeq) return `it starts at seq ${c.fromSeq}, before its epoch (${c.epochSeq})`;
  let atEpoch: EventRecord | undefined;
  try {
    atEpoch = records(c.epochSeq, c.epochSeq)[0];
  } catch {
    return undefined;
  }
  const epochType = epochTypeAt(atEpoch);
  if (epochType !== c.epochType || (epochType === null && c.epochSeq !== 1))
    return (
      `its epoch (seq ${c.epochSeq}, ${c.epochType ?? 'none'}) ` +
      `is not the log's (${epochType ?? 'no epoch event'} at seq ${c.epochSeq})`
    );
  const p = bucket(fromSeq, c.toSeq, c.epochSeq, c.epochType, rs);
  return `[${p.parts.join(',')}]` === c.messagesText && p.seqs.join() === c.seqs.join() && p.lastSurfaceSeq === c.lastSurfaceSeq
    ? undefined
    : 'its messages differ from those of the records it covers';
}
