/**
 * Event-store benchmark: what a durable append costs, measured against the disk's own fsync
 * floor, and how far group commit amortises it. Run with `npm run bench -- store`.
 *
 * Rows:
 * - the floor: a 64-byte pwrite at offset 0 + fdatasync, in the same directory as the LMDB files;
 * - `lmdbStore` appends (1 event, 2 events, `durability: 'committed'`, 100 concurrent sessions);
 * - raw lmdb-js variants opened directly with `open()`, to see where the time goes;
 * - the memory store, for reference.
 * When `strace` is available, each LMDB case is re-run in a child process under
 * `strace -f` and the disk syncs it issues per operation are counted (fdatasync / fsync calls
 * and writes to file descriptors opened with O_DSYNC, which is how LMDB syncs its meta page).
 */
import { randomUUID } from 'node:crypto';
import {
  closeSync,
  fdatasyncSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  rmSync,
  statSync,
  statfsSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { open, TransactionFlags, type RootDatabaseOptionsWithPath } from 'lmdb';
import type { EventDraft } from '../src/contracts/events.js';
import { lmdbStore } from '../src/persistence/lmdb-store.js';
import { memoryStore } from '../src/persistence/memory-store.js';
import type { EventStore } from '../src/persistence/event-store.js';
import { stepStart, userMsg } from '../test/helpers/drafts.js';
import {
  MARK_END,
  MARK_START,
  straceAvailable,
  straceChildRun,
  syncCell,
  syncDetail,
  totalSyncs,
  TRACED,
  type SyncCount,
} from './strace.js';
import { fmt, median, percentile, printTable, type Cell } from './table.js';

const THIS_FILE = fileURLToPath(import.meta.url);
const REPO = dirname(dirname(THIS_FILE));
const CHILD_FLAG = '--strace-child';

/** Sequential cases: SEQ_N measured operations each (fewer if TIME_BUDGET_MS runs out), after WARMUP unmeasured ones. */
const SEQ_N = 500;
const CHUNK = 50;
const MIN_N = 100;
const WARMUP = 25;
/** For all sequential cases together (they are interleaved). */
const TIME_BUDGET_MS = 45_000;
const SESSIONS = 100;
const PER_SESSION = 50;
/** Under strace: fewer operations (counts, not timings, are what matter there). */
const STRACE_SEQ_N = 100;
const STRACE_PER_SESSION = 10;

const CONTENT = 'Please summarise the attached report and list the open questions, one per line.';

// ---------------------------------------------------------------------------------------------
// Cases

interface Opened {
  /** One operation; may return the µs spent inside `transactionSync` (JS thread blocked). */
  op(i: number): Promise<number | undefined>;
  /** Untimed: waits for background work (lmdb-js's async flush) after each chunk and before the strace window closes. */
  settle?(): Promise<void>;
  close(): Promise<void>;
}

interface SeqCase {
  id: string;
  label: string;
  durable: string;
  open(dir: string): Promise<Opened>;
}

const oneEvent = (i: number): EventDraft[] => [userMsg(`${CONTENT} #${i}`, 1, i + 1)];
const twoEvents = (i: number): EventDraft[] => [userMsg(`${CONTENT} #${i}`, 1, i + 1), stepStart(1, i + 1)];

function storeCase(
  id: string,
  label: string,
  durable: string,
  durability: 'flushed' | 'committed',
  drafts: (i: number) => EventDraft[],
): SeqCase {
  return {
    id,
    label,
    durable,
    open: async (dir) => {
      const store = lmdbStore({ path: dir, durability });
      const timer = timeTransactionSync(store);
      const sessionId = 'bench-seq';
      const { writerEpoch } = await store.attachWriter(sessionId);
      let next = 1;
      return {
        op: async (i) => {
          const batch = drafts(i);
          timer?.reset();
          await store.append(sessionId, writerEpoch, next, batch);
          next += batch.length;
          return timer?.inside();
        },
        close: () => store.close(),
      };
    },
  };
}

/**
 * Bench-only instrumentation: wraps the store's (private) LMDB environment's transactionSync to
 * time how much of an append runs inside it. Returns undefined if the store has no such field.
 */
function timeTransactionSync(store: object): { reset(): void; inside(): number } | undefined {
  const env = (store as { env?: { transactionSync?: unknown } }).env;
  if (!env || typeof env.transactionSync !== 'function') return undefined;
  const original = env.transactionSync.bind(env) as (...args: unknown[]) => unknown;
  let total = 0;
  env.transactionSync = (...args: unknown[]) => {
    const t0 = performance.now();
    try {
      return original(...args);
    } finally {
      total += (performance.now() - t0) * 1000;
    }
  };
  return {
    reset: () => {
      total = 0;
    },
    inside: () => total,
  };
}

function memoryCase(): SeqCase {
  return {
    id: 'memory',
    label: 'memoryStore, 1 event/append',
    durable: 'no',
    open: async () => {
      const store: EventStore = memoryStore();
      const { writerEpoch } = await store.attachWriter('bench-seq');
      let next = 1;
      return {
        op: async (i) => {
          await store.append('bench-seq', writerEpoch, next++, oneEvent(i));
          return undefined;
        },
        close: () => store.close(),
      };
    },
  };
}

/** The floor as a case: 64-byte pwrite at offset 0 of a preallocated file + fdatasync. */
function floorCase(): SeqCase {
  return {
    id: 'floor',
    label: 'fsync floor: 64 B pwrite @0 + fdatasync',
    durable: 'n/a',
    open: async (dir) => {
      const path = join(dir, 'fsync-floor.bin');
      const fd = openSync(path, 'w+');
      writeSync(fd, Buffer.alloc(4096), 0, 4096, 0);
      fdatasyncSync(fd); // the size is fixed from here on: each fdatasync flushes data only
      const buf = Buffer.alloc(64, 0xab);
      return {
        op: async () => {
          writeSync(fd, buf, 0, 64, 0);
          fdatasyncSync(fd);
          return undefined;
        },
        close: async () => closeSync(fd),
      };
    },
  };
}

type RawMode = 'txn' | 'txn+flushed' | 'put' | 'put+flushed';

/** A record-sized JSON value (what the store writes per event). */
function rawValue(i: number): string {
  return JSON.stringify({
    sessionId: 'bench-raw',
    seq: i + 1,
    turn: 1,
    step: i + 1,
    attempt: 1,
    writerEpoch: 1,
    eventId: randomUUID(),
    type: 'user/message',
    surfaceOp: 'append',
    payload: { message: { role: 'user', content: `${CONTENT} #${i}` } },
    occurredAt: new Date().toISOString(),
    schemaVersion: '1',
  });
}

/**
 * A raw lmdb-js commit of one record-sized value. `storeLike` writes what the store writes per
 * append instead: the event, its event-id index entry and the session head, in three databases.
 */
function rawCase(
  id: string,
  label: string,
  durable: string,
  options: Omit<RootDatabaseOptionsWithPath, 'path'>,
  mode: RawMode,
  { storeLike = false, txnFlags }: { storeLike?: boolean; txnFlags?: TransactionFlags } = {},
): SeqCase {
  return {
    id,
    label,
    durable,
    open: async (dir) => {
      const env = open({ path: dir, maxDbs: 4, ...options });
      const db = env.openDB<string, string>({ name: 'events', encoding: 'string' });
      const events = env.openDB<string, [string, number]>({ name: 'events2', encoding: 'string' });
      const ids = env.openDB<number, [string, string]>({ name: 'ids' });
      const heads = env.openDB<string, string>({ name: 'heads', encoding: 'string' });
      const write = (i: number, key: string, value: string) => {
        if (!storeLike) return db.putSync(key, value);
        heads.get('bench-raw');
        events.putSync(['bench-raw', i + 1], value);
        ids.putSync(['bench-raw', randomUUID()], i + 1);
        heads.putSync(
          'bench-raw',
          JSON.stringify({
            sessionId: 'bench-raw',
            writerEpoch: 1,
            lastSeq: i + 1,
            lastTurn: 1,
            surfaceStartSeq: 1,
            openRun: null,
            lastSettledRun: null,
          }),
        );
      };
      return {
        op: async (i) => {
          const key = `k${String(i).padStart(9, '0')}`;
          const value = rawValue(i);
          let inside: number | undefined;
          if (mode === 'txn' || mode === 'txn+flushed') {
            const t0 = performance.now();
            // putSync, not put: put is asynchronous and would escape the transaction.
            env.transactionSync(() => write(i, key, value), txnFlags);
            inside = (performance.now() - t0) * 1000;
          } else {
            await db.put(key, value);
          }
          if (mode === 'txn+flushed' || mode === 'put+flushed') await env.flushed;
          return inside;
        },
        settle: async () => {
          await env.flushed;
        },
        close: () => env.close(),
      };
    },
  };
}

const STORE_1 = storeCase('store-1', "lmdbStore 'flushed' (journal + LMDB noSync), 1 event/append", 'yes', 'flushed', oneEvent);
const STORE_2 = storeCase(
  'store-2',
  "lmdbStore 'flushed' (journal + LMDB noSync), 2 events/append (user/message + step/start)",
  'yes',
  'flushed',
  twoEvents,
);
const STORE_COMMITTED = storeCase('store-committed', "lmdbStore 'committed', 1 event/append", 'no (kill-safe only)', 'committed', oneEvent);
const FLOOR = floorCase();
const RAW_CASES: SeqCase[] = [
  rawCase('raw-txn-flushed', 'raw: transactionSync + await flushed (overlappingSync, default)', 'yes', {}, 'txn+flushed'),
  rawCase('raw-txn-3db', 'raw: same, store-like txn (event + id index + head, 3 DBs)', 'yes', {}, 'txn+flushed', { storeLike: true }),
  rawCase(
    'raw-txn-nosyncflush',
    'raw: transactionSync(fn, ABORTABLE+SYNCHRONOUS_COMMIT+NO_SYNC_FLUSH) + await flushed',
    'yes',
    {},
    'txn+flushed',
    {
      txnFlags: TransactionFlags.ABORTABLE | TransactionFlags.SYNCHRONOUS_COMMIT | TransactionFlags.NO_SYNC_FLUSH,
    },
  ),
  rawCase('raw-txn-nooverlap', 'raw: transactionSync, overlappingSync: false', 'yes', { overlappingSync: false }, 'txn'),
  rawCase('raw-txn-nometasync', 'raw: transactionSync, noMetaSync: true', 'last-commit-may-be-lost', { noMetaSync: true }, 'txn'),
  rawCase('raw-txn-nosync', 'raw: transactionSync, noSync: true', 'no', { noSync: true }, 'txn'),
  rawCase('raw-put', 'raw: await db.put (overlappingSync)', 'no (resolves before flush)', {}, 'put'),
  rawCase('raw-put-flushed', 'raw: await db.put; await env.flushed', 'yes', {}, 'put+flushed'),
];
const MEMORY = memoryCase();
const SEQ_CASES: SeqCase[] = [FLOOR, STORE_1, STORE_2, STORE_COMMITTED, ...RAW_CASES, MEMORY];

// ---------------------------------------------------------------------------------------------
// Measurements

interface Samples {
  n: number;
  samples: number[];
  inside: number[];
  elapsedMs: number;
  /** Median of each interleaved chunk, in order: shows the disk's drift. */
  chunkMedians: number[];
  /** Process CPU time (user + system, all threads) spent while the case ran, µs. */
  cpuUs: number;
}

/**
 * Runs the sequential cases round-robin, CHUNK operations at a time, so that a drifting disk
 * (fsync latency moves by tens of percent over seconds on shared/virtual disks) affects every
 * case alike. Each case has its own directory and environment, all open at once.
 */
async function measureInterleaved(cases: readonly SeqCase[], dirOf: (id: string) => string): Promise<Map<string, Samples>> {
  const opened = new Map<string, Opened>();
  const out = new Map<string, Samples>();
  try {
    for (const c of cases) {
      const o = await c.open(dirOf(c.id));
      opened.set(c.id, o);
      for (let i = 0; i < WARMUP; i++) await o.op(i);
      await o.settle?.();
      out.set(c.id, { n: 0, samples: [], inside: [], elapsedMs: 0, chunkMedians: [], cpuUs: 0 });
    }
    const deadline = performance.now() + TIME_BUDGET_MS;
    for (let done = 0; done < SEQ_N && (done < MIN_N || performance.now() < deadline); done += CHUNK) {
      for (const c of cases) {
        const o = opened.get(c.id)!;
        const s = out.get(c.id)!;
        const chunk: number[] = [];
        const cpu0 = process.cpuUsage();
        const start = performance.now();
        for (let j = 0; j < CHUNK; j++) {
          const t0 = performance.now();
          const r = await o.op(WARMUP + s.n);
          chunk.push((performance.now() - t0) * 1000);
          s.n++;
          if (r !== undefined) s.inside.push(r);
        }
        s.elapsedMs += performance.now() - start;
        const cpu = process.cpuUsage(cpu0);
        s.cpuUs += cpu.user + cpu.system;
        s.samples.push(...chunk);
        s.chunkMedians.push(median(chunk));
        await o.settle?.(); // untimed: no background flush spills into the next case's chunk
      }
    }
    return out;
  } finally {
    for (const o of opened.values()) await o.close();
  }
}

interface Concurrent extends Samples {
  commits: number;
  flushes: number;
  appends: number;
}

/** `sessions` sessions, each awaiting its own appends in a loop, all at once. */
async function measureConcurrent(dir: string, sessions: number, perSession: number, onStart?: () => void): Promise<Concurrent> {
  const store = lmdbStore({ path: dir });
  try {
    const ids = Array.from({ length: sessions }, (_, k) => `bench-c-${k}`);
    const epochs = (await Promise.all(ids.map((id) => store.attachWriter(id)))).map((a) => a.writerEpoch);
    const next = ids.map(() => 1);
    const appendOne = (k: number) => store.append(ids[k]!, epochs[k]!, next[k]++, oneEvent(next[k]!));
    await Promise.all(ids.map((_, k) => appendOne(k))); // warm-up round
    onStart?.();
    const before = { ...store.stats };
    const samples: number[] = [];
    const cpu0 = process.cpuUsage();
    const start = performance.now();
    await Promise.all(
      ids.map(async (_, k) => {
        for (let j = 0; j < perSession; j++) {
          const t0 = performance.now();
          await appendOne(k);
          samples.push((performance.now() - t0) * 1000);
        }
      }),
    );
    const elapsedMs = performance.now() - start;
    const cpu = process.cpuUsage(cpu0);
    return {
      n: samples.length,
      samples,
      inside: [],
      elapsedMs,
      chunkMedians: [],
      cpuUs: cpu.user + cpu.system,
      commits: store.stats.commits - before.commits,
      flushes: store.stats.flushes - before.flushes,
      appends: store.stats.appends - before.appends,
    };
  } finally {
    await store.close();
  }
}

// ---------------------------------------------------------------------------------------------
// strace: count disk syncs per operation in a child process (helpers in bench/strace.ts)

function straceCase(caseId: string, dir: string): SyncCount | string {
  return straceChildRun(THIS_FILE, [CHILD_FLAG, caseId, join(dir, 'db')], dir, REPO);
}

/** The child side: run one case between two marker opens, print `{ pid, ops }`. */
async function straceChild(caseId: string, dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const mark = (name: string) => closeSync(openSync(join(dir, name), 'w'));
  if (caseId === 'store-concurrent') {
    await measureConcurrent(dir, SESSIONS, STRACE_PER_SESSION, () => mark(MARK_START));
    mark(MARK_END);
    console.log(JSON.stringify({ pid: process.pid, ops: SESSIONS * STRACE_PER_SESSION }));
    return;
  }
  const c = SEQ_CASES.find((x) => x.id === caseId);
  if (!c) throw new Error(`unknown case ${caseId}`);
  const o = await c.open(dir);
  for (let i = 0; i < 5; i++) await o.op(i);
  await o.settle?.();
  mark(MARK_START);
  for (let i = 0; i < STRACE_SEQ_N; i++) await o.op(5 + i);
  await o.settle?.();
  mark(MARK_END);
  await o.close();
  console.log(JSON.stringify({ pid: process.pid, ops: STRACE_SEQ_N }));
}

// ---------------------------------------------------------------------------------------------
// The bench

const FS_TYPES: Record<number, string> = {
  0xef53: 'ext2/3/4',
  0x58465342: 'xfs',
  0x9123683e: 'btrfs',
  0x01021994: 'tmpfs',
  0x794c7630: 'overlayfs',
  0x2fc12fc1: 'zfs',
  0x6969: 'nfs',
  0x65735546: 'fuse',
  0xf2f52010: 'f2fs',
};

function fsDescription(dir: string): string {
  try {
    const t = statfsSync(dir).type;
    return FS_TYPES[t] ?? `fs type 0x${t.toString(16)}`;
  } catch {
    return 'unknown fs';
  }
}

export async function benchStore(): Promise<void> {
  const root = process.env.ACTORLOOP_BENCH_TMP ?? join(REPO, '.tmp');
  mkdirSync(root, { recursive: true });
  const base = mkdtempSync(join(root, 'store-'));
  try {
    await run(base);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

async function run(base: string): Promise<void> {
  const dirOf = (id: string) => {
    const d = join(base, id);
    mkdirSync(d, { recursive: true });
    if (statSync(d).dev !== dev) throw new Error(`${d} is not on the same device as ${base}`);
    return d;
  };
  const dev = statSync(base).dev;
  const sameAsTmp = statSync(tmpdir()).dev === dev;
  const fs = fsDescription(base);
  console.log(
    `files under ${base} (${fs}, device ${dev}; the floor file and every LMDB environment live here); ` +
      `os.tmpdir() ${tmpdir()} is ${sameAsTmp ? 'on the same device' : 'on ANOTHER device (not used)'}`,
  );
  if (fs === 'tmpfs') console.log('WARNING: tmpfs ignores fsync; the floor and every ratio below are meaningless');

  const seq = await measureInterleaved(SEQ_CASES, dirOf);
  for (const c of SEQ_CASES) rmSync(join(base, c.id), { recursive: true, force: true });
  const conc = await measureConcurrent(dirOf('store-concurrent'), SESSIONS, PER_SESSION);
  rmSync(join(base, 'store-concurrent'), { recursive: true, force: true });
  const floor = median(seq.get(FLOOR.id)!.samples);

  // Disk syncs per op, counted by strace in child processes.
  const strace = new Map<string, SyncCount | string>();
  const traced = [FLOOR.id, STORE_1.id, STORE_2.id, STORE_COMMITTED.id, 'store-concurrent', ...RAW_CASES.map((c) => c.id)];
  let straceNote: string;
  if (straceAvailable()) {
    for (const id of traced) {
      strace.set(id, straceCase(id, join(base, `strace-${id}`)));
      rmSync(join(base, `strace-${id}`), { recursive: true, force: true });
    }
    const failure = [...strace.values()].find((v) => typeof v === 'string');
    straceNote = failure
      ? `strace could not count syncs (${failure})`
      : `syncs/op: \`strace -f -e ${TRACED}\` on a child process running the case (${STRACE_SEQ_N} sequential ops, or ` +
        `${SESSIONS}×${STRACE_PER_SESSION} concurrent); a sync is an fdatasync/fsync or a write to an O_DSYNC descriptor; ` +
        '"JS thr" = issued by the main (JS) thread';
  } else {
    straceNote = 'strace not installed: disk syncs per append not counted';
  }

  const ratio = (us: number) => `${fmt(us / floor, 2)}×`;
  const opsPerSec = (s: Samples) => (s.n / s.elapsedMs) * 1000;
  const headers = [
    'case',
    'n',
    'median µs',
    'p90 µs',
    '× floor',
    'CPU µs/op',
    'ops/s',
    'syncs/op (strace)',
    'durable vs power loss',
    'detail',
  ];
  const cpuPerOp = (s: Samples) => s.cpuUs / s.n;
  const rows: Cell[][] = [];
  const seqRow = (c: SeqCase) => {
    const s = seq.get(c.id)!;
    const m = median(s.samples);
    const sc = strace.get(c.id);
    const inside = s.inside.length ? `${fmt(median(s.inside))} µs inside transactionSync` : '';
    const chunks = `chunk medians ${fmt(Math.min(...s.chunkMedians))}–${fmt(Math.max(...s.chunkMedians))}`;
    rows.push([
      c.label,
      s.n,
      m,
      percentile(s.samples, 90),
      ratio(m),
      cpuPerOp(s),
      opsPerSec(s),
      syncCell(sc),
      c.durable,
      [inside, chunks, syncDetail(sc)].filter(Boolean).join('; '),
    ]);
  };
  seqRow(FLOOR);
  seqRow(STORE_1);
  seqRow(STORE_2);
  seqRow(STORE_COMMITTED);
  const perFlush = conc.flushes > 0 ? conc.appends / conc.flushes : Number.NaN;
  const concSync = strace.get('store-concurrent');
  rows.push([
    `lmdbStore 'flushed', ${SESSIONS} sessions × ${PER_SESSION} appends, concurrent`,
    conc.n,
    median(conc.samples),
    percentile(conc.samples, 90),
    '-',
    cpuPerOp(conc),
    opsPerSec(conc),
    syncCell(concSync),
    'yes',
    [
      `commits ${conc.commits}, flushes ${conc.flushes}, appends/flush ${fmt(perFlush, 1)} (target ≥ 20: ${perFlush >= 20 ? 'met' : 'NOT met'})`,
      syncDetail(concSync),
    ]
      .filter(Boolean)
      .join('; '),
  ]);
  for (const c of RAW_CASES) seqRow(c);
  seqRow(MEMORY);

  printTable(headers, rows, ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'left', 'left']);
  console.log(
    `\nn = measured operations (after ${WARMUP} warm-up ones); sequential cases run interleaved, ${CHUNK} operations at a time; ` +
      `ops/s = n / time spent in the case; CPU µs/op = process CPU (user + system, all threads) / n. ${straceNote}.`,
  );
  console.log(note({ floor, seq, conc, strace }));
  console.log(await rebuildLine(base));
}

/**
 * The journal rebuild after a machine restart (docs/event-log.md): 10 sessions × 1,000 appends
 * of 5 events, then data.mdb is replaced by garbage and the store reopened under a new boot id.
 */
async function rebuildLine(base: string): Promise<string> {
  const path = join(base, 'rebuild');
  const store = lmdbStore({ path, bootId: 'bench-boot-1' });
  const sessions = Array.from({ length: 10 }, (_, i) => `r${i}`);
  await Promise.all(
    sessions.map(async (s) => {
      const { writerEpoch } = await store.attachWriter(s);
      for (let b = 0, next = 1; b < 1000; b++, next += 5) {
        await store.append(
          s,
          writerEpoch,
          next,
          [0, 1, 2, 3, 4].map((j) => userMsg(`${s} ${next + j} ${'x'.repeat(400)}`)),
        );
      }
    }),
  );
  await store.close();
  const journalBytes = readdirSync(join(path, 'journal'))
    .filter((f) => f.endsWith('.wal'))
    .reduce((n, f) => n + statSync(join(path, 'journal', f)).size, 0);
  writeFileSync(join(path, 'data.mdb'), 'not an LMDB file');
  const t0 = performance.now();
  const rebuilt = lmdbStore({ path, bootId: 'bench-boot-2' });
  const ms = performance.now() - t0;
  const ok = (await rebuilt.getHead('r9'))?.lastSeq === 5000;
  await rebuilt.close();
  if (!ok) throw new Error('bench rebuild: the rebuilt store lost events');
  return `\nJournal rebuild after a simulated machine restart: 50,000 events (~550 B each; ${fmt(journalBytes / 1e6, 1)} MB of journal segments, zero-filled ahead included) in ${fmt(ms)} ms = ${fmt((ms * 1000) / 50_000, 1)} µs per event.`;
}

function note(r: { floor: number; seq: Map<string, Samples>; conc: Concurrent; strace: Map<string, SyncCount | string> }): string {
  const med = (id: string) => median(r.seq.get(id)!.samples);
  const x = (us: number) => `${fmt(us / r.floor, 1)}×`;
  const s1 = med(STORE_1.id);
  const raw = r.seq.get('raw-txn-flushed')!;
  const rawMed = median(raw.samples);
  const raw3 = med('raw-txn-3db');
  const storeInside = r.seq.get(STORE_1.id)!.inside;
  const committed = med(STORE_COMMITTED.id);
  const diff = (s1 - committed) / s1;
  const sc = r.strace.get(STORE_1.id);
  const cc = r.strace.get(STORE_COMMITTED.id);
  const concRate = (r.conc.n / r.conc.elapsedMs) * 1000;
  const seqRate = (r.seq.get(STORE_1.id)!.n / r.seq.get(STORE_1.id)!.elapsedMs) * 1000;
  const perFlush = r.conc.appends / Math.max(1, r.conc.flushes);
  const bullets = [
    `A power-loss-safe LMDB commit is two ORDERED flushes: the data pages (lseek+writev, then fdatasync), then the meta ` +
      `page that points at them (a pwrite on a second descriptor opened O_DSYNC). lmdbStore lets LMDB flush nothing (noSync): ` +
      `each commit writes one journal frame and fdatasyncs it inside the transaction (docs/event-log.md). ` +
      (sc && typeof sc !== 'string'
        ? `strace: ${fmt(totalSyncs(sc) / sc.ops, 2)} syncs per sequential append (${syncDetail(sc).replace('per op: ', '')}), ` +
          `${fmt(sc.onJsThread / sc.ops, 2)} of them on the JS thread.`
        : 'Syncs were not counted (no strace).'),
    `Sequential, one append at a time: raw lmdb-js commit ${fmt(rawMed)}\u00a0µs = ${x(rawMed)} the floor (${fmt(r.floor)}\u00a0µs); ` +
      `the same commit writing what the store writes (event + id index + head: 3 B-trees, more dirty pages) ${fmt(raw3)}\u00a0µs = ${x(raw3)}; ` +
      `lmdbStore append ${fmt(s1)}\u00a0µs = ${x(s1)}` +
      (storeInside.length
        ? `: ${fmt(median(storeInside))}\u00a0µs inside transactionSync, under the write lock (the journal frame's write and flush, ` +
          `an LMDB commit without flush — a raw one costs ${fmt(med('raw-txn-nosync'))}\u00a0µs — and the store logic: head decode, checks, ` +
          `building and encoding records), ${fmt(s1 - median(storeInside))}\u00a0µs outside it ` +
          `(draft validation, queueing, promises; the memory store's whole append takes ${fmt(med(MEMORY.id))}\u00a0µs). `
        : ` (the memory store's whole append takes ${fmt(med(MEMORY.id))}\u00a0µs). `) +
      `A 2-event batch costs ${fmt(med(STORE_2.id))}\u00a0µs (${x(med(STORE_2.id))}): still one commit, one flush.`,
    `transactionSync with its default flags flushes INSIDE the call, on the JS thread, holding the write lock: ` +
      `${fmt(median(raw.inside))} of ${fmt(rawMed)}\u00a0µs were spent inside it, so the \`await env.flushed\` that follows finds the ` +
      `flush done. overlappingSync (on by default) moves the flush off the JS thread only for lmdb-js's async writes ` +
      `(db.put: "0.00 JS thr"). With NO_SYNC_FLUSH, transactionSync commits first and then flushes, still inside the call ` +
      `(${x(med('raw-txn-nosyncflush'))}); overlappingSync: false costs the same two flushes (${x(med('raw-txn-nooverlap'))}).`,
    `noMetaSync: ${x(med('raw-txn-nometasync'))}, one fdatasync per commit; the meta page reaches disk with the NEXT commit's ` +
      `flush, so a power cut can undo the last acknowledged commit (the file stays consistent). ` +
      `noSync: ${x(med('raw-txn-nosync'))}, no flush at all.`,
    `durability 'committed' ${fmt(committed)}\u00a0µs vs 'flushed' ${fmt(s1)}\u00a0µs (${fmt(diff * 100)}% less)` +
      (cc && typeof cc !== 'string' && sc && typeof sc !== 'string'
        ? `, ${fmt(totalSyncs(cc) / cc.ops, 2)} vs ${fmt(totalSyncs(sc) / sc.ops, 2)} syncs per append: ` +
          (totalSyncs(cc) / cc.ops < totalSyncs(sc) / sc.ops - 0.5
            ? 'it skips the journal and its flush, so an acknowledged append survives a killed process but not a power cut.'
            : Math.abs(diff) < 0.2
              ? "no real saving: the flush already happened inside transactionSync when 'committed' skips the wait."
              : 'it skips only the wait for the flush.')
        : '.'),
    `await db.put resolves at commit, before its flush (${x(med('raw-put'))}); adding await env.flushed: ${x(med('raw-put-flushed'))}.`,
    `Group commit: ${SESSIONS} concurrent sessions reach ${fmt(concRate)} appends/s vs ${fmt(seqRate)}/s sequential ` +
      `(${fmt(concRate / seqRate, 1)}×) with ${fmt(perFlush, 1)} appends per flush. One group commit takes ` +
      `${fmt(r.conc.elapsedMs / Math.max(1, r.conc.commits), 1)} ms and each append ${fmt(r.conc.cpuUs / r.conc.n)}\u00a0µs of CPU, ` +
      `against ~${fmt(s1)}\u00a0µs for a sequential append: at this concurrency the store is CPU-bound, not disk-bound.`,
  ];
  return ['', 'Where the time goes:', ...bullets.map((b) => wrap(b, 110, '- ', '  '))].join('\n');
}

function wrap(text: string, width: number, first: string, rest: string): string {
  const lines: string[] = [];
  let line = first;
  for (const word of text.split(' ')) {
    if (line.length + word.length > width && line.trim().length > 1) {
      lines.push(line.trimEnd());
      line = rest;
    }
    line += `${word} `;
  }
  lines.push(line.trimEnd());
  return lines.join('\n');
}

// Child entry point: `tsx bench/store.ts --strace-child <case> <dir>` (spawned under strace).
if (process.argv[2] === CHILD_FLAG && resolve(process.argv[1] ?? '') === THIS_FILE) {
  await straceChild(process.argv[3]!, process.argv[4]!);
}
