import { closeSync, existsSync, fdatasyncSync, fstatSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { z } from 'zod';
import { CorruptLogError } from '../contracts/errors.js';

/**
 * The LMDB store's write-ahead journal (docs/event-log.md, "Durability"): the one file a commit
 * flushes. Each LMDB write transaction appends one *frame* holding every put it made; the frame is
 * written and `fdatasync`ed while the transaction still holds LMDB's writer lock, then LMDB
 * commits without flushing. A commit therefore costs one device flush instead of LMDB's two
 * (data pages, then the meta page), and the journal alone can rebuild the LMDB file after a power
 * cut or kernel crash, which is the only case where LMDB's unflushed pages can be lost.
 *
 * Layout: `<path>/journal/<n>.wal` segments, numbered from 1, each created full of zeros and
 * flushed before first use (overwriting flushed zeros needs no file-size update, so each commit's
 * `fdatasync` flushes the frame's data block only). A frame is a 20-byte header — magic, CRC-32
 * of the rest, payload length, frame number (consecutive from 1 across segments) — followed by
 * the payload: the transaction's puts as JSON. A frame that does not fit the rest of its segment
 * starts the next one.
 * Where the frames end is known from LMDB (the `journal` database's state, written in the same
 * transaction), or, when rebuilding, from the first frame that does not check out.
 */

const MAGIC = 0x314a_4c41; // "ALJ1" little-endian
const HEADER = 20;
const MIN_SEGMENT = 256 * 1024;
const MAX_SEGMENT = 16 * 1024 * 1024;

/** Where the next frame goes; stored in LMDB by every transaction that writes a frame. */
export const JournalState = z.object({
  segment: z.number().int().positive(),
  offset: z.number().int().nonnegative(),
  nextFrame: z.number().int().positive(),
});
export type JournalState = z.infer<typeof JournalState>;

export const INITIAL_STATE: JournalState = { segment: 1, offset: 0, nextFrame: 1 };

/** Segment n's size: it doubles from 256 KiB up to 16 MiB, so a small store stays small. */
export function segmentSize(n: number): number {
  return Math.min(MAX_SEGMENT, MIN_SEGMENT * 2 ** Math.min(n - 1, 10));
}

const segmentName = (n: number) => `${String(n).padStart(10, '0')}.wal`;

/** Header: magic, CRC-32 of everything after it (length, number, payload), payload length, frame number. */
export function encodeFrame(frame: number, payload: string): Buffer {
  const len = Buffer.byteLength(payload);
  const buf = Buffer.allocUnsafe(HEADER + len);
  buf.writeUInt32LE(MAGIC, 0);
  buf.writeUInt32LE(len, 8);
  buf.writeDoubleLE(frame, 12);
  buf.write(payload, HEADER, 'utf8');
  buf.writeUInt32LE(crc32(buf.subarray(8)), 4);
  return buf;
}

const MAGIC_BYTES = (() => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(MAGIC, 0);
  return b;
})();

/** The number of a frame at `pos` whose header and CRC check out, whatever its number. */
function validFrameNumber(seg: Buffer, pos: number): number | undefined {
  if (pos + HEADER > seg.length) return undefined;
  const number = seg.readDoubleLE(pos + 12);
  return decodeFrame(seg, pos, number) === undefined ? undefined : number;
}

/** The payload of a valid frame numbered `frame` at `pos`, or undefined (end of the journal). */
function decodeFrame(seg: Buffer, pos: number, frame: number): Buffer | undefined {
  if (pos + HEADER > seg.length || seg.readUInt32LE(pos) !== MAGIC) return undefined;
  const len = seg.readUInt32LE(pos + 8);
  if (pos + HEADER + len > seg.length || seg.readDoubleLE(pos + 12) !== frame) return undefined;
  if (crc32(seg.subarray(pos + 8, pos + HEADER + len)) !== seg.readUInt32LE(pos + 4)) return undefined;
  return seg.subarray(pos + HEADER, pos + HEADER + len);
}

export class Journal {
  private fd: number | undefined;
  private fdSegment = 0;
  private preparing: Promise<void> | null = null;
  /** The highest segment this process prepared (or found prepared). */
  private prepared = 0;

  constructor(readonly dir: string) {}

  /** Creates the directory (flushed into its parent) and segment 1 (if missing). */
  init(): void {
    if (!existsSync(this.dir)) {
      mkdirSync(this.dir, { recursive: true });
      syncDir(join(this.dir, '..'));
    }
    if (!existsSync(join(this.dir, segmentName(1)))) this.createSegment(1, segmentSize(1));
  }

  /**
   * Writes one frame at `state` and flushes it; returns the state after it and the µs spent
   * waiting in flushes. Called inside the LMDB write transaction (the writer lock serialises
   * frames across processes).
   */
  write(state: JournalState, payload: string): { next: JournalState; at: JournalState; flushMicros: number } {
    const frame = encodeFrame(state.nextFrame, payload);
    let flushMicros = 0;
    const flush = (fd: number) => {
      const t = performance.now();
      fdatasyncSync(fd);
      flushMicros += (performance.now() - t) * 1000;
    };
    let at = state;
    if (state.offset + frame.length > this.sizeOf(state.segment)) {
      const n = state.segment + 1;
      const path = join(this.dir, segmentName(n));
      // The end of this segment is marked first: a frame left at state.offset by a commit that
      // never happened (its process killed after the flush) must not read as frame N, ahead of
      // the real frame N in the next segment.
      const rest = this.sizeOf(state.segment) - state.offset;
      if (rest > 0) {
        const fd = this.open(state.segment);
        writeFully(fd, Buffer.alloc(Math.min(HEADER, rest)), state.offset);
        flush(fd);
      }
      // The next segment was prepared in the background (prepareNext) if all went well; its bytes
      // are zeros, or at worst one frame of a commit that never happened, which this overwrites.
      if (existsSync(path) && statSync(path).size >= frame.length) syncDir(this.dir);
      else this.createSegment(n, Math.max(segmentSize(n), frame.length));
      at = { segment: n, offset: 0, nextFrame: state.nextFrame };
    }
    const fd = this.open(at.segment);
    try {
      writeFully(fd, frame, at.offset);
      flush(fd);
    } catch (e) {
      // The caller is told the commit failed: a whole frame left behind (its flush failed, e.g.
      // EIO, but it may still reach the disk) must not come back in a rebuild. Best effort.
      try {
        writeFully(fd, Buffer.alloc(4), at.offset);
        fdatasyncSync(fd);
      } catch {
        // the next commit writes its own frame over it
      }
      throw e;
    }
    return { at, next: { segment: at.segment, offset: at.offset + frame.length, nextFrame: at.nextFrame + 1 }, flushMicros };
  }

  /**
   * After a commit: once the current segment is half full, the next one is zero-filled in the
   * background, so that moving to it costs a directory flush instead of a zero-fill inside the
   * write lock. Another process may prepare it too: the first to link it into place wins.
   */
  prepareNext(state: JournalState): void {
    if (this.preparing || this.prepared > state.segment || state.offset < this.sizeOf(state.segment) / 2) return;
    const n = state.segment + 1;
    this.preparing = prepareSegment(this.dir, n, segmentSize(n))
      .then(() => {
        this.prepared = n;
      })
      .catch(() => {}) // write() creates it in the lock instead
      .finally(() => {
        this.preparing = null;
      });
  }

  /** Waits for a background preparation (before closing). */
  async settle(): Promise<void> {
    await this.preparing;
  }

  /**
   * Best effort after a transaction that wrote a frame failed to commit: breaks the frame's magic
   * so that a rebuild cannot bring back what its callers were told had failed. The caller holds
   * the writer lock and has checked that no commit took the frame's place (lmdb-store.ts).
   */
  invalidate(at: JournalState): void {
    try {
      const fd = this.open(at.segment);
      writeFully(fd, Buffer.alloc(4), at.offset);
      fdatasyncSync(fd);
    } catch {
      // the next commit overwrites the frame anyway
    }
  }

  /**
   * Every valid frame in order, from frame 1 up to the first that does not check out. Only the
   * last frame can be torn (each is flushed before the next is written), so a valid frame
   * numbered past the first bad one means damage in the middle: CorruptLogError, nothing dropped.
   */
  *frames(): Generator<Buffer, JournalState> {
    let state = INITIAL_STATE;
    for (let n = 1; existsSync(join(this.dir, segmentName(n))); n++) {
      const seg = readFileSync(join(this.dir, segmentName(n)));
      let pos = 0;
      let payload: Buffer | undefined;
      while ((payload = decodeFrame(seg, pos, state.nextFrame)) !== undefined) {
        yield payload;
        pos += HEADER + payload.length;
        state = { segment: n, offset: pos, nextFrame: state.nextFrame + 1 };
      }
      // A segment the frames never reached ends them; otherwise they may go on in the next one.
      if (pos === 0 && n > 1) break;
    }
    this.assertNothingAfter(state);
    return state;
  }

  /** Throws if a valid frame numbered after `end.nextFrame` lies anywhere past `end`. */
  private assertNothingAfter(end: JournalState): void {
    for (const n of this.segments()) {
      if (n < end.segment) continue;
      const seg = readFileSync(join(this.dir, segmentName(n)));
      for (let pos = seg.indexOf(MAGIC_BYTES, n === end.segment ? end.offset : 0); pos !== -1; pos = seg.indexOf(MAGIC_BYTES, pos + 1)) {
        const number = validFrameNumber(seg, pos);
        if (number !== undefined && number > end.nextFrame) {
          throw new CorruptLogError(
            `journal ${segmentName(end.segment)}`,
            end.nextFrame,
            `frame ${end.nextFrame} at offset ${end.offset} does not check out, but frame ${number} follows in ${segmentName(n)} at offset ${pos}: ` +
              'the journal is damaged before its end, so the log cannot be rebuilt from it (nothing was changed)',
          );
        }
      }
    }
  }

  /** Removes segments after `last` (left over past the end a rebuild found). */
  dropAfter(last: number): void {
    for (const n of this.segments()) if (n > last) unlinkSync(join(this.dir, segmentName(n)));
    syncDir(this.dir);
  }

  /** Whether frame 1 exists: the journal holds at least one commit. */
  hasFrames(): boolean {
    const head = readHead(join(this.dir, segmentName(1)));
    return head !== undefined && head.length === HEADER && head.readUInt32LE(0) === MAGIC && head.readDoubleLE(12) === 1;
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private segments(): number[] {
    if (!existsSync(this.dir)) return [];
    return readdirSync(this.dir)
      .map((f) => /^(\d{10})\.wal$/.exec(f)?.[1])
      .filter((s): s is string => s !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
  }

  private sizeOf(n: number): number {
    if (n !== this.fdSegment) this.open(n);
    return this.fdSize;
  }

  private fdSize = 0;

  private open(n: number): number {
    if (this.fd !== undefined && this.fdSegment === n) return this.fd;
    this.close();
    const path = join(this.dir, segmentName(n));
    this.fd = openSync(path, 'r+');
    this.fdSegment = n;
    this.fdSize = fstatSync(this.fd).size;
    return this.fd;
  }

  /** A fresh zero-filled segment, flushed, then renamed into place and the directory flushed. */
  private createSegment(n: number, size: number): void {
    const final = join(this.dir, segmentName(n));
    const tmp = `${final}.${randomUUID()}.tmp`;
    const fd = openSync(tmp, 'w');
    try {
      const zeros = Buffer.alloc(Math.min(size, 1024 * 1024));
      for (let off = 0; off < size; off += zeros.length) writeFully(fd, zeros.subarray(0, Math.min(zeros.length, size - off)), off);
      fsyncSync(fd);
    } catch (e) {
      closeSync(fd);
      rmSync(tmp, { force: true });
      throw e;
    }
    closeSync(fd);
    if (this.fdSegment === n) this.close();
    renameSync(tmp, final);
    syncDir(this.dir);
  }
}

function readHead(path: string): Buffer | undefined {
  if (!existsSync(path)) return undefined;
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(HEADER);
    return buf.subarray(0, readSync(fd, buf, 0, HEADER, 0));
  } finally {
    closeSync(fd);
  }
}

/** createSegment's asynchronous twin, which never replaces an existing segment. */
async function prepareSegment(dir: string, n: number, size: number): Promise<void> {
  const final = join(dir, segmentName(n));
  if (existsSync(final)) return;
  const tmp = `${final}.${randomUUID()}.tmp`;
  const fh = await fsp.open(tmp, 'w');
  try {
    const zeros = Buffer.alloc(Math.min(size, 1024 * 1024));
    for (let off = 0; off < size; off += zeros.length) await fh.write(zeros, 0, Math.min(zeros.length, size - off), off);
    await fh.sync();
  } catch (e) {
    await fsp.rm(tmp, { force: true });
    throw e;
  } finally {
    await fh.close();
  }
  try {
    await fsp.link(tmp, final);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  } finally {
    await fsp.unlink(tmp);
  }
  if (process.platform === 'win32') return; // as in syncDir
  const dh = await fsp.open(dir, 'r');
  try {
    await dh.sync();
  } finally {
    await dh.close();
  }
}

function writeFully(fd: number, buf: Buffer, pos: number): void {
  let done = 0;
  while (done < buf.length) done += writeSync(fd, buf, done, buf.length - done, pos + done);
}

/**
 * Flushes a directory's entries (a new or renamed file survives a power cut only then). Windows
 * cannot open a directory to flush it; NTFS journals its metadata, so there it is skipped.
 */
export function syncDir(dir: string): void {
  if (process.platform === 'win32') return;
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
