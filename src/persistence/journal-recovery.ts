import { randomUUID } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, linkSync, openSync, readFileSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { uptime } from 'node:os';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import { CorruptLogError } from '../contracts/errors.js';
import { INITIAL_STATE, Journal, syncDir, type JournalState } from './journal.js';

/**
 * When the LMDB file can be trusted, and how it is rebuilt from the journal when it cannot
 * (docs/event-log.md, "Durability"). LMDB runs without flushing: after a killed process its
 * pages are still in the kernel's page cache, so the file is whole; only a kernel crash or power
 * cut can lose them (and may leave a file whose newest meta page points at pages never written).
 * The `BOOT` file names the kernel boot under which the file was (re)built; while the machine has
 * not restarted since, every LMDB write since then is in the page cache or on disk. A different
 * boot id means the file may be damaged: it is deleted, unread, and rebuilt from the journal.
 */

/** The kernel's boot id (Linux); elsewhere the boot time to the minute. */
export function currentBootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return `boot-${Math.round((Date.now() / 1000 - uptime()) / 60)}`;
  }
}

/**
 * One put of a write transaction, as the journal records it. A head or record value is its JSON
 * text embedded as JSON (what JSON.stringify wrote, so stringifying the parsed value gives the
 * same text back); a migrated value that may not be JSON is embedded as a string.
 */
export type JournalOp = ['h', string, unknown] | ['e', string, number, unknown] | ['i', string, string, number];

const text = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));

/** The frame payload of a transaction's puts, built around the already-encoded JSON values. */
export class FrameBuilder {
  private parts: string[] = [];
  get size(): number {
    return this.parts.length;
  }
  head(sessionId: string, json: string): void {
    this.parts.push(`["h",${JSON.stringify(sessionId)},${json}]`);
  }
  event(sessionId: string, seq: number, json: string): void {
    this.parts.push(`["e",${JSON.stringify(sessionId)},${seq},${json}]`);
  }
  eventId(sessionId: string, eventId: string, seq: number): void {
    this.parts.push(JSON.stringify(['i', sessionId, eventId, seq]));
  }
  payload(): string {
    return `[${this.parts.join(',')}]`;
  }
}

export interface LogDbs {
  env: RootDatabase;
  events: Database<string, [string, number]>;
  heads: Database<string, string>;
  ids: Database<number, [string, string]>;
  journal: Database<string, string>;
}

/**
 * Every open of a store's environment uses the same flags: `noSync` — the journal is what a
 * commit flushes. (Not `useWritemap`, although it makes a commit ~9 µs cheaper: with several
 * processes growing the map, an open that maps the file at its own, smaller size truncates it
 * under the others, which die of SIGBUS — test/persistence/lmdb-multiprocess.test.ts caught it.)
 */
export function openDbs(path: string): LogDbs {
  const env = open({ path, maxDbs: 8, noSync: true });
  return {
    env,
    events: env.openDB<string, [string, number]>({ name: 'events', encoding: 'string' }),
    heads: env.openDB<string, string>({ name: 'heads', encoding: 'string' }),
    ids: env.openDB<number, [string, string]>({ name: 'ids' }),
    journal: env.openDB<string, string>({ name: 'journal', encoding: 'string' }),
  };
}

export function applyOps(dbs: LogDbs, ops: readonly JournalOp[]): void {
  for (const op of ops) {
    if (op[0] === 'h') dbs.heads.putSync(op[1], text(op[2]));
    else if (op[0] === 'e') dbs.events.putSync([op[1], op[2]], text(op[3]));
    else dbs.ids.putSync([op[1], op[2]], op[3]);
  }
}

export function readState(dbs: LogDbs): JournalState {
  const raw = dbs.journal.get('state');
  return raw === undefined ? INITIAL_STATE : (JSON.parse(raw) as JournalState);
}

/**
 * Makes `<path>` safe to open without flushing: returns once the LMDB file is known whole for
 * this boot, rebuilding it from the journal first if needed. Concurrent openers of one path
 * serialise on `recovery.lock`.
 */
export function recover(path: string, journal: Journal, bootId: string): void {
  const bootFile = join(journal.dir, 'BOOT');
  const stored = () => (existsSync(bootFile) ? readFileSync(bootFile, 'utf8') : undefined);
  if (stored() === bootId) return;
  withLock(join(path, 'recovery.lock'), bootId, () => {
    if (stored() === bootId) return; // another process recovered it meanwhile
    const legacy = stored() === undefined && !existsSync(journal.dir) && existsSync(join(path, 'data.mdb'));
    journal.init();
    if (legacy) migrate(path, journal);
    else rebuild(path, journal);
    writeDurably(bootFile, bootId);
  });
}

/** Deletes the LMDB file unread and replays every journal frame into a new one. */
function rebuild(path: string, journal: Journal): void {
  for (const f of ['data.mdb', 'lock.mdb']) rmSync(join(path, f), { force: true });
  const dbs = openDbs(path);
  try {
    const frames = journal.frames();
    let batch: JournalOp[][] = [];
    let size = 0;
    const flush = () => {
      const ops = batch;
      dbs.env.transactionSync(() => ops.forEach((o) => applyOps(dbs, o)));
      batch = [];
      size = 0;
    };
    for (;;) {
      const it = frames.next();
      if (it.done) {
        flush();
        const end = it.value;
        dbs.env.transactionSync(() => dbs.journal.putSync('state', JSON.stringify(end)));
        journal.dropAfter(end.segment);
        break;
      }
      batch.push(parseFrame(it.value));
      size += it.value.length;
      if (size > 4 * 1024 * 1024) flush();
    }
  } finally {
    void dbs.env.close();
  }
}

/**
 * A store written before the journal existed (every commit flushed by LMDB itself): its whole
 * content becomes the journal's first frames, so that a later rebuild starts from it.
 */
function migrate(path: string, journal: Journal): void {
  const dbs = openDbs(path);
  try {
    let state = readState(dbs);
    let ops: JournalOp[] = [];
    let size = 0;
    const emit = () => {
      if (ops.length === 0) return;
      state = journal.write(state, JSON.stringify(ops)).next;
      ops = [];
      size = 0;
    };
    const add = (op: JournalOp, bytes: number) => {
      ops.push(op);
      size += bytes;
      if (size > 1024 * 1024) emit();
    };
    for (const { key, value } of dbs.heads.getRange()) add(['h', String(key), value], value.length);
    for (const { key, value } of dbs.events.getRange()) add(['e', key[0], key[1], value], value.length);
    for (const { key, value } of dbs.ids.getRange()) add(['i', key[0], key[1], value], 64);
    emit();
    const end = state;
    dbs.env.transactionSync(() => dbs.journal.putSync('state', JSON.stringify(end)));
  } finally {
    void dbs.env.close();
  }
}

function parseFrame(payload: Buffer): JournalOp[] {
  try {
    return JSON.parse(payload.toString('utf8')) as JournalOp[];
  } catch (e) {
    // the frame's checksum matched, so this is not a torn write: refuse to guess
    throw new CorruptLogError('*', 0, `journal frame is not JSON: ${(e as Error).message}`);
  }
}

function writeDurably(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  const fd = openSync(tmp, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  syncDir(join(file, '..'));
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * A cross-process mutex: a file naming its holder (boot id, pid, a token), created with its
 * content in one step (written aside, then hard-linked into place, which fails if it exists —
 * so nobody ever reads a half-written lock). A lock whose holder is from another boot or dead is
 * stale: it is moved aside and removed only if what was moved is what was judged stale.
 */
function withLock(lockPath: string, bootId: string, fn: () => void): void {
  const mine = `${bootId} ${process.pid} ${randomUUID()}`;
  for (;;) {
    const tmp = `${lockPath}.${randomUUID()}`;
    writeFileSync(tmp, mine);
    try {
      linkSync(tmp, lockPath);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    } finally {
      unlinkSync(tmp);
    }
    const held = readLock(lockPath);
    if (held !== undefined && isStale(held, bootId)) {
      const aside = `${lockPath}.stale.${randomUUID()}`;
      try {
        renameSync(lockPath, aside);
      } catch {
        continue; // gone meanwhile
      }
      if (readLock(aside) !== held) {
        try {
          linkSync(aside, lockPath); // a live holder's lock: put it back
        } catch {
          // taken meanwhile; the holder's release finds its token missing and leaves it
        }
      }
      rmSync(aside, { force: true });
      continue;
    }
    Atomics.wait(sleeper, 0, 0, 20);
  }
  try {
    fn();
  } finally {
    if (readLock(lockPath) === mine) unlinkSync(lockPath);
  }
}

function readLock(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

function isStale(held: string, bootId: string): boolean {
  const [boot, pid] = held.split(' ');
  if (boot !== bootId) return true;
  try {
    process.kill(Number(pid), 0);
    return false;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
