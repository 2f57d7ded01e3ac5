import { randomUUID } from 'node:crypto';
import { chmodSync, closeSync, existsSync, fsyncSync, openSync, readdirSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import * as fsp from 'node:fs/promises';

/** File helpers of the journal (journal.ts): reading a segment's first bytes, zero-filled segments, directory flushes. */

export function readStart(path: string, bytes: number): Buffer | undefined {
  if (!existsSync(path)) return undefined;
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(bytes);
    return buf.subarray(0, readSync(fd, buf, 0, bytes, 0));
  } finally {
    closeSync(fd);
  }
}

/** Owner-only modes for everything the store creates (docs/guarantees.md): conversations are private. */
export const FILE_MODE = 0o600;
export const DIR_MODE = 0o700;

/**
 * Makes the files LMDB created in `dir` 0600, whatever the umask (LMDB creates its files 0664 less
 * the umask), and `dir` 0700 when actorloop created it (`created`; default true: a folder of the
 * store's own, such as recovery/): an existing folder a user named as the store's path keeps its
 * mode. Best effort: a store shared with another owner stays as it is.
 */
export function ownerOnly(dir: string, { created = true }: { created?: boolean } = {}): void {
  try {
    if (created) chmodSync(dir, DIR_MODE);
    for (const f of readdirSync(dir)) if (f.endsWith('.mdb')) chmodSync(join(dir, f), FILE_MODE);
  } catch {
    // not ours to change
  }
}

/** A fresh zero-filled file of `size` bytes, flushed, then renamed to `final` (the caller flushes the directory). */
export function createZeroFile(final: string, size: number): void {
  const tmp = `${final}.${randomUUID()}.tmp`;
  const fd = openSync(tmp, 'w', FILE_MODE);
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
  renameSync(tmp, final);
}

/** createZeroFile's asynchronous twin, which never replaces an existing segment. */
export async function prepareSegment(dir: string, final: string, size: number): Promise<void> {
  if (existsSync(final)) return;
  const tmp = `${final}.${randomUUID()}.tmp`;
  const fh = await fsp.open(tmp, 'w', FILE_MODE);
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

export function writeFully(fd: number, buf: Buffer, pos: number): void {
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
