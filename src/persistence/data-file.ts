import { closeSync, existsSync, fstatSync, openSync, readSync } from 'node:fs';
import { join } from 'node:path';

/**
 * What `data.mdb` looks like from outside, read with plain file reads before LMDB maps it: LMDB
 * maps the file and trusts its meta pages, so a file cut short under pages the meta page points
 * at kills the process with SIGBUS on the first read past its end. This check costs one `fstat`
 * and one 8 KiB read per open.
 *
 * Layout (lmdb-js's LMDB, 64-bit): pages 0 and 1 are meta pages; each holds, after a 24-byte
 * page header, the magic 0xBEEFC0DE, the format version (2), the free and main databases
 * (48 bytes each: the page size is the free database's first field, the root page the last),
 * the last page used and the transaction id. LMDB uses the valid meta page with the higher id.
 */
export type DataFile =
  | { state: 'missing' }
  | { state: 'empty' }
  | { state: 'sound'; pageSize: number; pages: number }
  | { state: 'damaged'; reason: string };

const HEADER = 24;
const MAGIC = 0xbeefc0de;
const VERSION = 2;
const META = { magic: 0, version: 4, pageSize: 24, freeRoot: 64, mainRoot: 112, lastPage: 120, txnid: 128 };

interface Meta {
  pageSize: number;
  freeRoot: number;
  mainRoot: number;
  lastPage: number;
  txnid: number;
}

function readMeta(buf: Buffer, at: number): Meta | undefined {
  const o = at + HEADER;
  if (o + META.txnid + 8 > buf.length) return undefined;
  if (buf.readUInt32LE(o + META.magic) !== MAGIC || buf.readUInt32LE(o + META.version) !== VERSION) return undefined;
  const n = (off: number) => Number(buf.readBigUInt64LE(o + off));
  return {
    pageSize: buf.readUInt32LE(o + META.pageSize),
    freeRoot: n(META.freeRoot),
    mainRoot: n(META.mainRoot),
    lastPage: n(META.lastPage),
    txnid: n(META.txnid),
  };
}

const NO_ROOT = 2 ** 64 - 1; // P_INVALID: an empty database

export function inspectDataFile(dir: string): DataFile {
  const file = join(dir, 'data.mdb');
  if (!existsSync(file)) return { state: 'missing' };
  const fd = openSync(file, 'r');
  try {
    // the meta pages first, then the size: the file only grows, and LMDB writes a transaction's
    // pages before the meta page that points at them, so what the meta says is within the size
    const buf = Buffer.alloc(2 * 65536);
    const got = readSync(fd, buf, 0, buf.length, 0);
    const size = fstatSync(fd).size;
    if (size === 0) return { state: 'empty' };
    const first = readMeta(buf.subarray(0, got), 0);
    const pageSize = first?.pageSize ?? 4096;
    const second = pageSize >= 512 && pageSize <= 65536 ? readMeta(buf.subarray(0, got), pageSize) : undefined;
    const metas = [first, second].filter((m): m is Meta => m !== undefined && m.pageSize === pageSize);
    if (metas.length === 0) return { state: 'damaged', reason: `data.mdb (${size} bytes) has no valid LMDB meta page` };
    const meta = metas.reduce((a, b) => (b.txnid > a.txnid ? b : a));
    if (size % pageSize !== 0)
      return { state: 'damaged', reason: `data.mdb is ${size} bytes, not a whole number of ${pageSize}-byte pages: it was cut short` };
    const pages = size / pageSize;
    for (const [name, root] of [
      ['main', meta.mainRoot],
      ['free-page', meta.freeRoot],
    ] as const) {
      if (root !== NO_ROOT && root >= pages) {
        return {
          state: 'damaged',
          reason: `data.mdb has ${pages} pages, but its ${name} database starts at page ${root}: it was cut short`,
        };
      }
    }
    // LMDB may count a few pages it allocated and freed unwritten in one transaction (the file
    // can then end before lastPage); more than that many missing means the file was cut short
    if (meta.lastPage + 1 - pages > LOOSE_PAGES) {
      return { state: 'damaged', reason: `data.mdb has ${pages} pages, but LMDB has used ${meta.lastPage + 1}: it was cut short` };
    }
    return { state: 'sound', pageSize, pages };
  } finally {
    closeSync(fd);
  }
}

/** The most pages LMDB can leave unwritten at the end of the file (see above). */
const LOOSE_PAGES = 16;
