import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { uptime } from 'node:os';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import { CorruptLogError, isCorruptLogError } from '../contracts/errors.js';
import { seal } from './checksum.js';
import { inspectDataFile } from './data-file.js';
import { INITIAL_STATE, Journal, JournalState, syncDir } from './journal.js';
import { FILE_MODE, ownerOnly } from './journal-files.js';

/**
 * When the LMDB file can be trusted, and how it is rebuilt from the journal when it cannot
 * (docs/event-log.md, "Durability"). LMDB runs without flushing: after a killed process its
 * pages are still in the kernel's page cache, so the file is whole; only a kernel crash or power
 * cut can lose them (and may leave a file whose newest meta page points at pages never written).
 * The `BOOT` file names the kernel boot under which the file was (re)built; while the machine has
 * not restarted since, every LMDB write since then is in the page cache or on disk. A different
 * boot id means the file may be damaged: it is deleted, unread, and rebuilt from the journal.
 */

/**
 * The kernel's boot id: Linux's `boot_id`, macOS's `kern.bootsessionuuid`. Elsewhere, the boot
 * time to the minute — a stepped clock can change it within one boot, which forces a rebuild
 * (docs/event-log.md says so).
 */
export function currentBootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    // not Linux
  }
  if (process.platform === 'darwin') {
    try {
      return execFileSync('sysctl', ['-n', 'kern.bootsessionuuid'], { encoding: 'utf8' }).trim();
    } catch {
      // fall through
    }
  }
  return `boot-${Math.round((Date.now() / 1000 - uptime()) / 60)}`;
}

/**
 * One put of a write transaction, as the journal records it. A head or record value is its JSON
 * text embedded as JSON (what JSON.stringify wrote, so stringifying the parsed value gives the
 * same text back); a migrated value that may not be JSON is embedded as a string.
 */
export type JournalOp =
  | ['h', string, unknown]
  | ['e', string, number, unknown]
  | ['i', string, string, number]
  | ['x', AuxDb, string, string]
  | ['b', string, string];

/** The databases of the inbox and leases (work-store.ts), journaled as `x` ops: db, key (JSON of the LMDB key), value. */
export type AuxDb = 'inbox' | 'work';

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
  /** A blob (blob-store.ts): its name and its bytes as base64. */
  blob(sha256: string, bytes: Uint8Array): void {
    this.parts.push(`["b","${sha256}","${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64')}"]`);
  }
  aux(db: AuxDb, key: string | string[], value: string): void {
    this.parts.push(JSON.stringify(['x', db, JSON.stringify(key), value]));
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
  /** Surface chunks by [sessionId, fromSeq] (surface-chunks.ts; a cache of the records, not journaled). */
  surface?: Database<string, [string, number]>;
  /** Inbox entries by [sessionId, entryId]; work rows (inbox counters, leases) by sessionId; worker heartbeats (not journaled). */
  inbox?: Database<string, string[]>;
  work?: Database<string, string>;
  workers?: Database<string, string>;
  /** Blobs by their SHA-256 (blob-store.ts): bytes, journaled as `b` ops, never deleted. */
  blobs?: Database<Buffer, string>;
  /** The live holder of each session by sessionId (lmdb-holders.ts; not journaled). */
  holders?: Database<string, string>;
}

/**
 * Every open of a store's environment uses the same flags: `noSync` — the journal is what a
 * commit flushes. (Not `useWritemap`, although it makes a commit ~9 µs cheaper: with several
 * processes growing the map, an open that maps the file at its own, smaller size truncates it
 * under the others, which die of SIGBUS — test/persistence/lmdb-multiprocess.test.ts caught it.)
 */
export function openDbs(path: string): LogDbs {
  // noSubdir: false — the path is a directory even when its name has a dot (lmdb-js would take
  // `store.v1` for a file name)
  const env = open({ path, maxDbs: 12, noSync: true, noSubdir: false });
  return {
    env,
    events: env.openDB<string, [string, number]>({ name: 'events', encoding: 'string' }),
    heads: env.openDB<string, string>({ name: 'heads', encoding: 'string' }),
    ids: env.openDB<number, [string, string]>({ name: 'ids' }),
    journal: env.openDB<string, string>({ name: 'journal', encoding: 'string' }),
    inbox: env.openDB<string, string[]>({ name: 'inbox', encoding: 'string' }),
    work: env.openDB<string, string>({ name: 'work', encoding: 'string' }),
    workers: env.openDB<string, string>({ name: 'workers', encoding: 'string' }),
    surface: env.openDB<string, [string, number]>({ name: 'surface', encoding: 'string' }),
    blobs: env.openDB<Buffer, string>({ name: 'blobs', encoding: 'binary' }),
    holders: env.openDB<string, string>({ name: 'holders', encoding: 'string' }),
  };
}

/**
 * Replays puts into LMDB. A head or record embedded as JSON is sealed with its checksum
 * (checksum.ts); one embedded as a string (copied by a migration) is stored as it was.
 */
export function applyOps(dbs: LogDbs, ops: readonly JournalOp[]): void {
  const stored = (v: unknown) => (typeof v === 'string' ? v : seal(JSON.stringify(v)));
  for (const op of ops) {
    if (op[0] === 'h') dbs.heads.putSync(op[1], stored(op[2]));
    else if (op[0] === 'e') dbs.events.putSync([op[1], op[2]], stored(op[3]));
    else if (op[0] === 'i') dbs.ids.putSync([op[1], op[2]], op[3]);
    else if (op[0] === 'b') dbs.blobs!.putSync(op[1], Buffer.from(op[2], 'base64'));
    else if (op[1] === 'inbox') dbs.inbox!.putSync(JSON.parse(op[2]) as string[], op[3]);
    else dbs.work!.putSync(JSON.parse(op[2]) as string, op[3]);
  }
}

/**
 * Where the journal's next frame goes, as this LMDB file records it. A journaled store always
 * has it (the rebuild or migration writes it before any commit): a missing or unreadable state
 * means the file is not the one the journal describes.
 */
export function readState(dbs: LogDbs, path: string): JournalState {
  const raw = dbs.journal.get('state');
  let state: ReturnType<typeof JournalState.safeParse> | undefined;
  try {
    state = raw === undefined ? undefined : JournalState.safeParse(JSON.parse(raw));
  } catch {
    state = undefined;
  }
  if (!state?.success) {
    throw new CorruptLogError(
      '(journal)',
      0,
      `the LMDB file at ${path} has no readable journal state: ` +
        `it is not the file the journal describes (run \`actorloop repair ${path}\` to rebuild it from the journal)`,
    );
  }
  return state.data;
}

/** Records where the journal's next frame goes; inside the write transaction that wrote the frame. */
export function writeState(dbs: LogDbs, state: JournalState): void {
  dbs.journal.putSync('state', JSON.stringify(state));
}

/**
 * Makes `<path>` safe to open without flushing: returns once the LMDB file is known whole for
 * this boot, rebuilding it from the journal first if needed. Concurrent openers of one path
 * serialise on a lock the kernel releases if its holder dies (withLock).
 */
export function recover(path: string, journal: Journal, bootId: string): void {
  const bootFile = join(journal.dir, 'BOOT');
  const stored = () => (existsSync(bootFile) ? readFileSync(bootFile, 'utf8') : undefined);
  if (stored() === bootId && dataFileTrusted(path, journal)) return;
  withLock(path, () => {
    if (stored() === bootId && dataFileTrusted(path, journal)) return; // another process recovered it meanwhile
    const staging = `${journal.dir}.new`;
    // An interrupted migration starts over. It may have recorded its state in LMDB already: its
    // nonce, kept both in journal.new/MIGRATION and in LMDB, tells it from a journal that is lost.
    const leftover = existsSync(join(staging, 'MIGRATION')) ? readFileSync(join(staging, 'MIGRATION'), 'utf8') : undefined;
    // everything but its nonce, which a redo keeps (killed again mid-copy, it is still a redo)
    if (leftover === undefined) rmSync(staging, { recursive: true, force: true });
    else for (const f of readdirSync(staging)) if (f !== 'MIGRATION') rmSync(join(staging, f), { recursive: true, force: true });
    if (!existsSync(journal.dir) && existsSync(join(path, 'data.mdb'))) {
      const data = inspectDataFile(path);
      if (data.state === 'damaged')
        throw new CorruptLogError('(store)', 0, `${path}/${data.reason}, and the store has no journal to rebuild it from`);
      migrate(path, new Journal(staging), bootId, leftover);
      renameSync(staging, journal.dir);
      syncDir(path);
      return;
    }
    journal.init();
    // the same boot, and yet rebuilt: data.mdb is damaged, missing or empty; kept aside if there
    const damaged = stored() === bootId ? inspectDataFile(path) : undefined;
    try {
      rebuild(path, journal, damaged?.state === 'damaged' || damaged?.state === 'empty');
    } catch (e) {
      if (damaged?.state === 'damaged' && isCorruptLogError(e))
        throw new CorruptLogError(e.sessionId, e.seq, `${path}/${damaged.reason}; rebuilding it failed: ${e.reason}`);
      throw e;
    }
    writeDurably(bootFile, bootId);
  });
}

/**
 * Whether data.mdb can be opened as it is (the boot id matched): it is whole as far as a look
 * from outside can tell (data-file.ts), or it is missing or empty while the journal holds no
 * frame (a new store). Damaged with no frame to rebuild it from: CorruptLogError.
 */
function dataFileTrusted(path: string, journal: Journal): boolean {
  const data = inspectDataFile(path);
  if (data.state === 'sound') return true;
  if (journal.hasFrames()) return false;
  if (data.state === 'damaged')
    throw new CorruptLogError('(store)', 0, `${path}/${data.reason}, and the journal holds no frame to rebuild it from`);
  return true;
}

/**
 * Replays every journal frame into a new LMDB file, built aside (`<path>/rebuild/`) and moved
 * over `data.mdb` only once the whole journal has been read and checked: the old file is never
 * read, and never removed if the journal turns out damaged (CorruptLogError). With `keepOld`
 * (a damaged file, kept for inspection) it is moved aside instead of replaced: returns where.
 */
export function rebuild(path: string, journal: Journal, keepOld = false): string | undefined {
  const aside = join(path, 'rebuild');
  rmSync(aside, { recursive: true, force: true });
  const dbs = openDbs(aside);
  ownerOnly(aside);
  let end: JournalState;
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
    for (let n = 1; ; n++) {
      const it = frames.next();
      if (it.done) {
        end = it.value;
        break;
      }
      batch.push(parseFrame(it.value, n));
      size += it.value.length;
      if (size > 4 * 1024 * 1024) flush();
    }
    flush();
    const state = end;
    dbs.env.transactionSync(() => writeState(dbs, state));
  } finally {
    void dbs.env.close();
  }
  const kept = keepOld && existsSync(join(path, 'data.mdb')) ? damagedName(path) : undefined;
  if (kept) renameSync(join(path, 'data.mdb'), kept);
  renameSync(join(aside, 'data.mdb'), join(path, 'data.mdb'));
  rmSync(join(path, 'lock.mdb'), { force: true }); // from before the restart: nobody holds it
  rmSync(aside, { recursive: true, force: true });
  syncDir(path);
  journal.dropAfter(end);
  return kept;
}

/**
 * A store without a journal (written by an older actorloop, or in 'committed' mode): its whole
 * content becomes the first frames of a journal built in `journal.new/`, which becomes the
 * journal only once complete (with its BOOT), so an interrupted migration is simply redone.
 */
function migrate(path: string, staging: Journal, bootId: string, leftover: string | undefined): void {
  staging.init();
  const nonce = leftover ?? randomUUID();
  if (leftover === undefined) writeDurably(join(staging.dir, 'MIGRATION'), nonce);
  const dbs = openDbs(path);
  try {
    // All in one write transaction: LMDB's writer lock keeps every other writer (a 'committed'
    // store opened before) out until the state is recorded, so no commit can fall between the
    // copy and the state that makes later commits refuse to go on without the journal.
    dbs.env.transactionSync(() => copyIntoJournal(dbs, staging, path, leftover, nonce));
  } finally {
    staging.close();
    void dbs.env.close();
  }
  writeDurably(join(staging.dir, 'BOOT'), bootId);
}

function copyIntoJournal(dbs: LogDbs, staging: Journal, path: string, leftover: string | undefined, nonce: string): void {
  // a state left by an interrupted migration (the same nonce in LMDB and in its leftover staging)
  // is redone; any other state means the store was written with a journal that is now gone
  const redo = leftover !== undefined && dbs.journal.get('migration') === leftover;
  if (!redo && dbs.journal.get('state') !== undefined) {
    // written with a journal that is gone: adopting the file would hide that its frames are lost
    throw new CorruptLogError(
      '(journal)',
      0,
      `the journal directory ${staging.dir.replace(/\.new$/, '')} is missing, but the LMDB file at ${path} was written with a journal: ` +
        `restore the journal directory (nothing was changed)`,
    );
  }
  {
    let state = INITIAL_STATE;
    let ops: JournalOp[] = [];
    let size = 0;
    const emit = () => {
      if (ops.length === 0) return;
      state = staging.write(state, JSON.stringify(ops)).next;
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
    for (const { key, value } of dbs.inbox?.getRange() ?? []) add(['x', 'inbox', JSON.stringify(key), value], value.length);
    for (const { key, value } of dbs.work?.getRange() ?? []) add(['x', 'work', JSON.stringify(key), value], value.length);
    for (const { key, value } of dbs.blobs?.getRange() ?? []) add(['b', key, value.toString('base64')], value.length);
    emit();
    writeState(dbs, state);
    dbs.journal.putSync('migration', nonce);
  }
}

const isOp = (op: unknown): op is JournalOp =>
  Array.isArray(op) &&
  ((op[0] === 'h' && op.length === 3 && typeof op[1] === 'string') ||
    (op[0] === 'e' && op.length === 4 && typeof op[1] === 'string' && Number.isInteger(op[2])) ||
    (op[0] === 'i' && op.length === 4 && typeof op[1] === 'string' && typeof op[2] === 'string' && Number.isInteger(op[3])) ||
    (op[0] === 'b' && op.length === 3 && typeof op[1] === 'string' && typeof op[2] === 'string') ||
    (op[0] === 'x' &&
      op.length === 4 &&
      (op[1] === 'inbox' || op[1] === 'work') &&
      typeof op[2] === 'string' &&
      typeof op[3] === 'string'));

function parseFrame(payload: Buffer, frame: number): JournalOp[] {
  let ops: unknown;
  try {
    ops = JSON.parse(payload.toString('utf8'));
  } catch (e) {
    ops = e;
  }
  // the frame's checksum matched, so this is not a torn write: refuse to guess
  if (!Array.isArray(ops) || !ops.every(isOp)) {
    throw new CorruptLogError('(journal)', frame, `journal frame ${frame} checks out but does not hold a list of puts`);
  }
  return ops;
}

/** Where a damaged data.mdb is kept: `data.mdb.damaged-<time>` beside it. */
export function damagedName(path: string): string {
  return join(path, `data.mdb.damaged-${new Date().toISOString().replace(/[:.]/g, '-')}`);
}

export function writeDurably(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: FILE_MODE });
  const fd = openSync(tmp, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  syncDir(join(file, '..'));
}

/**
 * A cross-process mutex the kernel releases if its holder dies: the write transaction of a tiny
 * LMDB environment of its own (`<path>/recovery/`, whose writer mutex is robust), held while
 * `fn` runs. No takeover logic, no process ids (which containers on one host do not share).
 */
export function withLock(path: string, fn: () => void): void {
  const env = open({ path: join(path, 'recovery'), maxDbs: 1, noSync: true, noSubdir: false });
  ownerOnly(join(path, 'recovery'));
  try {
    env.transactionSync(fn);
  } finally {
    void env.close();
  }
}
