import {
  closeSync,
  existsSync,
  fdatasyncSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  unlinkSync,
} from 'node:fs';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { z } from 'zod';
import { CorruptLogError, StoreError } from '../contracts/errors.js';
import { createZeroFile, DIR_MODE, prepareSegment, readStart, syncDir, writeFully } from './journal-files.js';

export { syncDir } from './journal-files.js';

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
 * starts the next one; the old segment then ends with a *continuation mark* (a header with its own
 * magic, "ALJN", and the next frame's number), so that a next segment deleted or lost later is
 * named as missing instead of ending the journal early.
 * Where the frames end is known from LMDB (the `journal` database's state, written in the same
 * transaction), or, when rebuilding, from the first frame that does not check out.
 */

const MAGIC = 0x314a_4c41; // "ALJ1" little-endian
const MAGIC_NEXT = 0x4e4a_4c41; // "ALJN": the frames go on in the next segment
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

export const segmentName = (n: number) => `${String(n).padStart(10, '0')}.wal`;

/** Header: magic, CRC-32 of everything after it (length, number, payload), payload length, frame number. */
export function encodeFrame(frame: number, payload: string, magic = MAGIC): Buffer {
  const len = Buffer.byteLength(payload);
  const buf = Buffer.allocUnsafe(HEADER + len);
  buf.writeUInt32LE(magic, 0);
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
function decodeFrame(seg: Buffer, pos: number, frame: number, magic = MAGIC): Buffer | undefined {
  if (pos + HEADER > seg.length || seg.readUInt32LE(pos) !== magic) return undefined;
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

  /**
   * Creates the directory (flushed into its parent) and segment 1 (if missing). A journal that
   * has been recovered once (it has a BOOT file) and has lost segment 1 is damaged, not new.
   */
  init(): void {
    if (!existsSync(this.dir)) {
      mkdirSync(this.dir, { recursive: true, mode: DIR_MODE });
      syncDir(join(this.dir, '..'));
    }
    if (!existsSync(join(this.dir, segmentName(1)))) {
      if (existsSync(join(this.dir, 'BOOT'))) throw this.missing(1, 'it holds the first frames');
      this.createSegment(1, segmentSize(1));
    }
  }

  private missing(n: number, why: string): CorruptLogError {
    return new CorruptLogError(
      `journal ${segmentName(n)}`,
      0,
      `journal segment ${join(this.dir, segmentName(n))} is missing (${why}): ` +
        `the log cannot be rebuilt from this journal (nothing was changed)`,
    );
  }

  /**
   * Writes one frame at `state` and flushes it; returns the state after it and the µs spent
   * waiting in flushes. Called inside the LMDB write transaction (the writer lock serialises
   * frames across processes).
   */
  write(state: JournalState, payload: string): { next: JournalState; at: JournalState; flushMicros: number } {
    try {
      return this.writeFrame(state, payload);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (typeof code !== 'string') throw e;
      throw new StoreError(
        `${this.dir}/${segmentName(state.segment)}`,
        `the journal could not be written (${(e as Error).message}); the commit was not made`,
        { cause: e },
      );
    }
  }

  private writeFrame(state: JournalState, payload: string): { next: JournalState; at: JournalState; flushMicros: number } {
    this.assertLinked(state.segment);
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
      // The next segment was prepared in the background (prepareNext) if all went well; its bytes
      // are zeros, or at worst one frame of a commit that never happened, which this overwrites.
      // It exists before the mark below names it.
      if (existsSync(path) && statSync(path).size >= frame.length) syncDir(this.dir);
      else this.createSegment(n, Math.max(segmentSize(n), frame.length));
      // The end of this segment is marked: a frame left at state.offset by a commit that never
      // happened (its process killed after the flush) must not read as frame N, ahead of the real
      // frame N in the next segment; the mark also says that the frames go on there.
      const rest = this.sizeOf(state.segment) - state.offset;
      if (rest > 0) {
        const fd = this.open(state.segment);
        writeFully(fd, rest >= HEADER ? encodeFrame(state.nextFrame, '', MAGIC_NEXT) : Buffer.alloc(rest), state.offset);
        flush(fd);
      }
      at = { segment: n, offset: 0, nextFrame: state.nextFrame };
    }
    const fd = this.open(at.segment);
    if (at !== state) this.assertLinked(at.segment);
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
    this.preparing = prepareSegment(this.dir, join(this.dir, segmentName(n)), segmentSize(n))
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
   * last frame can be torn (each is flushed before the next is written), so anything else that
   * cuts the journal short is a CorruptLogError and nothing is dropped: a valid frame numbered
   * past the first bad one, a segment missing before the last one or cut short, segment 1
   * missing, or a segment whose continuation mark names a next segment that is gone.
   */
  *frames(): Generator<Buffer, JournalState> {
    const last = this.checkSegments();
    let state = INITIAL_STATE;
    for (let n = 1; n <= last; n++) {
      const seg = readFileSync(join(this.dir, segmentName(n)));
      let pos = 0;
      let payload: Buffer | undefined;
      while ((payload = decodeFrame(seg, pos, state.nextFrame)) !== undefined) {
        yield payload;
        pos += HEADER + payload.length;
        state = { segment: n, offset: pos, nextFrame: state.nextFrame + 1 };
      }
      if (n === last && pos > 0 && decodeFrame(seg, pos, state.nextFrame, MAGIC_NEXT) !== undefined) {
        throw this.missing(n + 1, `${segmentName(n)} ends with a mark saying that frame ${state.nextFrame} and later ones are there`);
      }
      // A segment the frames never reached ends them; otherwise they may go on in the next one.
      if (pos === 0 && n > 1) break;
    }
    this.assertNothingAfter(state);
    return state;
  }

  /**
   * The segments are numbered 1…last without a gap, each at least as long as it was created
   * (segments are zero-filled to their full size before use); returns the last one's number.
   */
  checkSegments(): number {
    const present = this.segments();
    if (present.length === 0) {
      if (existsSync(join(this.dir, 'BOOT'))) throw this.missing(1, 'it holds the first frames');
      return 0;
    }
    const last = present[present.length - 1]!;
    for (let n = 1; n <= last; n++) {
      if (present[n - 1] !== n) throw this.missing(n, `segment ${segmentName(last)} comes after it`);
      const size = statSync(join(this.dir, segmentName(n))).size;
      if (size < segmentSize(n)) {
        throw new CorruptLogError(
          `journal ${segmentName(n)}`,
          0,
          `journal segment ${join(this.dir, segmentName(n))} is ${size} bytes, but segments are created with ${segmentSize(n)}: ` +
            `it was cut short, and the log cannot be rebuilt from this journal (nothing was changed)`,
        );
      }
    }
    return last;
  }

  /**
   * Throws unless the segments reach `state`, the end LMDB recorded: each segment up to
   * state.segment exists, whole. (Cheap: a directory listing and a stat per segment, at open.)
   */
  assertReaches(state: JournalState): void {
    const last = this.checkSegments();
    if (last < state.segment) throw this.missing(state.segment, `the store recorded frames up to ${state.nextFrame - 1} in it`);
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
            `frame ${end.nextFrame} at offset ${end.offset} does not check out, ` +
              `but frame ${number} follows in ${segmentName(n)} at offset ${pos}: ` +
              'the journal is damaged before its end, so the log cannot be rebuilt from it (nothing was changed)',
          );
        }
      }
    }
  }

  /**
   * Removes segments after `end`'s (left over past the end a rebuild found). A continuation mark
   * at `end` (its commit failed) is cleared first, so it cannot name a removed segment as missing.
   */
  dropAfter(end: JournalState): void {
    const seg = readStart(join(this.dir, segmentName(end.segment)), end.offset + HEADER);
    if (seg && decodeFrame(seg, end.offset, end.nextFrame, MAGIC_NEXT) !== undefined) {
      const fd = this.open(end.segment);
      writeFully(fd, Buffer.alloc(HEADER), end.offset);
      fdatasyncSync(fd);
    }
    for (const n of this.segments()) if (n > end.segment) unlinkSync(join(this.dir, segmentName(n)));
    syncDir(this.dir);
  }

  /** Whether frame 1 exists: the journal holds at least one commit. */
  hasFrames(): boolean {
    const head = readStart(join(this.dir, segmentName(1)), HEADER);
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

  /**
   * A segment removed under the open store (by hand, or with the whole journal directory) would
   * take every later frame with it: the commit is refused instead (one fstat per commit).
   */
  private assertLinked(n: number): void {
    const fd = this.open(n);
    if (fstatSync(fd).nlink === 0) {
      this.close();
      throw new StoreError(
        `${this.dir}/${segmentName(n)}`,
        'the journal segment was removed while the store was open; ' +
          'the commit was not made. Close the store and run `actorloop verify` on it',
      );
    }
  }

  /** A fresh zero-filled segment, flushed, then renamed into place and the directory flushed. */
  private createSegment(n: number, size: number): void {
    if (this.fdSegment === n) this.close();
    createZeroFile(join(this.dir, segmentName(n)), size);
    syncDir(this.dir);
  }
}
