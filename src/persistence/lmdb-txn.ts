import type { Database } from 'lmdb';
import { CorruptLogError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import type { LogTxn } from './append-core.js';
import { seal, unseal } from './checksum.js';
import { decodeRecord, decodeSealed, encodedKeyPrefix, encodedOffSurface } from './codec.js';
import { isCurrentHead, SessionHead } from './head.js';
import { FrameBuilder, type LogDbs } from './journal-recovery.js';
import { guarded } from './lmdb-errors.js';
import type { ChunkIo } from './surface-chunks.js';

/**
 * The LMDB store's reads and writes of single values: every value is sealed with its checksum on
 * the way in and checked on the way out (checksum.ts), and LMDB's own errors become typed ones
 * naming session and seq (lmdb-errors.ts). Journal frames carry the plain JSON text.
 */

export class LmdbTxn implements LogTxn, ChunkIo {
  /** Set once the current op has written: an error after that must abort the whole transaction. */
  dirty = false;
  /** Every put of the transaction, for its journal frame (null: no journal). */
  readonly frame: FrameBuilder | null;
  private readonly events: Database<string, [string, number]>;
  private readonly heads: Database<string, string>;
  private readonly ids: Database<number, [string, string]>;
  constructor(
    private readonly dbs: LogDbs,
    journaled: boolean,
    private readonly path: string,
  ) {
    this.events = dbs.events;
    this.heads = dbs.heads;
    this.ids = dbs.ids;
    this.frame = journaled ? new FrameBuilder() : null;
  }
  head(sessionId: string): SessionHead | undefined {
    return readHead(this.heads, sessionId, this.path);
  }
  seqOfEventId(sessionId: string, eventId: string): number | undefined {
    return guarded({ path: this.path, sessionId, seq: 0 }, () => this.ids.get([sessionId, eventId]));
  }
  event(sessionId: string, seq: number): EventRecord {
    return readRecord(this.events, sessionId, seq, this.path);
  }
  surfaceRecords(sessionId: string, fromSeq: number, toSeq: number): EventRecord[] {
    return readStoredRange(this.events, this.path, sessionId, fromSeq, toSeq, toSeq, surfaceDecoder(sessionId)).records;
  }
  putSurfaceChunk(sessionId: string, fromSeq: number, stored: string): void {
    this.dirty = true;
    this.dbs.surface!.putSync([sessionId, fromSeq], stored);
  }
  removeSurfaceChunks(sessionId: string, beforeSeq: number): void {
    const surface = this.dbs.surface!;
    for (const key of [...surface.getKeys({ start: [sessionId, 0], end: [sessionId, beforeSeq] })]) {
      this.dirty = true;
      surface.removeSync(key);
    }
  }
  putHead(head: SessionHead): void {
    this.dirty = true;
    const text = JSON.stringify(head);
    this.heads.putSync(head.sessionId, seal(text));
    this.frame?.head(head.sessionId, text);
  }
  putEvent(record: EventRecord, text: string): void {
    this.dirty = true;
    this.events.putSync([record.sessionId, record.seq], seal(text));
    this.frame?.event(record.sessionId, record.seq, text);
  }
  /** Stores a blob unless stored already (then nothing is written, nothing journaled). */
  putBlob(sha256: string, bytes: Uint8Array): void {
    const blobs = this.dbs.blobs!;
    if (guarded({ path: this.path }, () => blobs.doesExist(sha256))) return;
    this.dirty = true;
    blobs.putSync(sha256, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    this.frame?.blob(sha256, bytes);
  }
  putEventId(sessionId: string, eventId: string, seq: number): void {
    this.dirty = true;
    this.ids.putSync([sessionId, eventId], seq);
    this.frame?.eventId(sessionId, eventId, seq);
  }
}

export function readHead(heads: Database<string, string>, sessionId: string, path: string): SessionHead | undefined {
  const raw = guarded({ path, sessionId, seq: 0 }, () => heads.get(sessionId));
  if (raw === undefined) return undefined;
  const json = unseal(sessionId, 0, raw);
  try {
    const head = JSON.parse(json as string) as unknown;
    // a sealed head that passed its checksum, with every field of today's schema: as written
    return json !== raw && isCurrentHead(head) ? head : SessionHead.parse(head);
  } catch (e) {
    throw new CorruptLogError(sessionId, 0, `head record is unreadable: ${(e as Error).message}`);
  }
}

/** One stored record, checked and decoded (undefined stored value: CorruptLogError "missing"). */
export function readRecord(events: Database<string, [string, number]>, sessionId: string, seq: number, path: string): EventRecord {
  return decodeStored(
    sessionId,
    seq,
    guarded({ path, sessionId, seq }, () => events.get([sessionId, seq])),
  );
}

/**
 * A stored value (as LMDB returned it) checked against its checksum and decoded: a sealed one by
 * the checksum (decodeSealed), one written before checksums by its full schema (decodeRecord).
 */
export function decodeStored(sessionId: string, seq: number, raw: unknown): EventRecord {
  return decodeUnsealed(sessionId, seq, raw, unseal(sessionId, seq, raw));
}

/** `raw` decoded once unsealed to `json` (the same value when it was never sealed). */
const decodeUnsealed = (sessionId: string, seq: number, raw: unknown, json: unknown): EventRecord =>
  json === raw ? decodeRecord(sessionId, seq, raw) : decodeSealed(sessionId, seq, json as string);

/**
 * A stored value checked against its checksum and validated by its full schema, payload included:
 * what `verify` reads, to catch a record a writer got wrong beside the damage a checksum catches.
 */
export function decodeFully(sessionId: string, seq: number, raw: unknown): EventRecord {
  return decodeRecord(sessionId, seq, unseal(sessionId, seq, raw));
}

/** How a stored value at `seq` of `sessionId` is decoded: a record, or undefined to skip it. */
export type StoredDecoder = (sessionId: string, seq: number, raw: unknown) => EventRecord | undefined;

/**
 * The stored records `fromSeq..toSeq` in seq order, each decoded by `decode`, and the seq after
 * the last one stored: a gap, or a range that ends before `mustExist`, is a CorruptLogError.
 */
export function readStoredRange(
  events: Database<string, [string, number]>,
  path: string,
  sessionId: string,
  fromSeq: number,
  toSeq: number,
  mustExist: number,
  decode: StoredDecoder,
): { records: EventRecord[]; next: number } {
  const stored = guarded({ path, sessionId, seq: fromSeq }, () => [
    ...events.getRange({ start: [sessionId, fromSeq], end: [sessionId, toSeq + 1] }),
  ]);
  const records: EventRecord[] = [];
  let next = fromSeq;
  for (const { key, value } of stored) {
    if (key[1] !== next) throw new CorruptLogError(sessionId, next, `record missing (next stored seq is ${key[1]})`);
    const e = decode(sessionId, next++, value);
    if (e) records.push(e);
  }
  if (next <= toSeq && next <= mustExist)
    throw new CorruptLogError(sessionId, next, `record missing (the head says the log ends at seq ${mustExist})`);
  return { records, next };
}

/** decodeStoredSurface for `sessionId`'s records. */
export function surfaceDecoder(sessionId: string): StoredDecoder {
  const prefix = encodedKeyPrefix(sessionId);
  return (sid, seq, raw) => decodeStoredSurface(sid, seq, raw, prefix);
}

/**
 * decodeStored for a read of the surface: a sealed record whose text says surfaceOp "none" (most
 * of a log: calls, step and run markers) is checked against its checksum but not decoded.
 */
export function decodeStoredSurface(sessionId: string, seq: number, raw: unknown, keyPrefix: string): EventRecord | undefined {
  const json = unseal(sessionId, seq, raw);
  if (json !== raw && encodedOffSurface(json as string, keyPrefix, seq)) return undefined;
  const r = decodeUnsealed(sessionId, seq, raw, json);
  return r.surfaceOp === 'none' ? undefined : r;
}
