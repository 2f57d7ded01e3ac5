import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, spawnTs, STORE_CHILD } from './child-util.js';

/**
 * Durability before acknowledgement, proved at the system-call level: a child writes `BEGIN i`,
 * awaits one append, writes `ACK i`, under `strace -f`. Between the two writes, the commit's
 * writes to data.mdb must happen, and each of them must be on disk before `ACK i` starts: either
 * followed by a completed fdatasync/fsync of that file, or made through a descriptor opened with
 * O_DSYNC/O_SYNC (LMDB writes its meta page that way, after an fdatasync of the data pages, so
 * "an fdatasync after the last pwrite64" would be the wrong rule). Data pages go out with writev
 * as well as pwrite64, hence the wider filter; `-y` names each descriptor's file.
 *
 * Two deliberately broken writers show that the check can fail. `durability: 'committed'` cannot
 * serve as the negative control: lmdb-js commits a `transactionSync` synchronously (fdatasync,
 * then the O_DSYNC meta write, inside mdb_txn_commit), so that mode passes this check too.
 */
const N = 50;
const TRACED = ['fdatasync', 'fsync', 'pwrite64', 'pwritev', 'pwritev2', 'writev', 'write', 'openat'];

const hasStrace = spawnSync('strace', ['-V'], { stdio: 'ignore' }).status === 0;
const inCi = process.env.CI === 'true';

interface Call {
  tid: string;
  name: string;
  /** Line index where the call was entered (its own line, or its `<unfinished ...>` line). */
  start: number;
  /** Line index where it returned (its own line, or its `<... resumed>` line). */
  end: number;
  fd?: number;
  fdPath?: string;
  ret?: string;
  args: string;
}

/** Parses `strace -f -ttt -y` output, joining `<unfinished ...>` / `<... x resumed>` pairs per thread. */
function parseStrace(text: string): { calls: Call[]; dsyncFds: Map<number, boolean> } {
  const calls: Call[] = [];
  const pending = new Map<string, Call>();
  const lines = text.split('\n');
  const finish = (c: Call, tail: string, idx: number) => {
    c.end = idx;
    const m = /\)\s+=\s+(-?\d+|\?)(<[^>]*>)?/.exec(tail);
    c.ret = m?.[1];
    if (c.name === 'openat' && m?.[2] !== undefined) c.fdPath = m[2].slice(1, -1);
    calls.push(c);
  };
  lines.forEach((line, idx) => {
    const head = /^(\d+)\s+\d+\.\d+\s+(.*)$/.exec(line);
    if (!head) return;
    const [, tid, rest] = head as unknown as [string, string, string];
    const resumed = /^<\.\.\. (\w+) resumed>(.*)$/.exec(rest);
    if (resumed) {
      const c = pending.get(tid);
      if (c && c.name === resumed[1]) {
        pending.delete(tid);
        c.args += resumed[2];
        finish(c, resumed[2]!, idx);
      }
      return;
    }
    const call = /^(\w+)\((.*)$/.exec(rest);
    if (!call) return; // signals, exits
    const c: Call = { tid, name: call[1]!, start: idx, end: idx, args: call[2]! };
    const fd = /^(\d+)(?:<([^>]*)>)?/.exec(c.args);
    if (fd && c.name !== 'openat') {
      c.fd = Number(fd[1]);
      c.fdPath = fd[2];
    }
    if (c.args.endsWith('<unfinished ...>')) pending.set(tid, c);
    else finish(c, c.args, idx);
  });
  // openat returns: which descriptors write synchronously (O_DSYNC / O_SYNC), by fd number, last open wins.
  const dsyncFds = new Map<number, boolean>();
  for (const c of [...calls].sort((a, b) => a.end - b.end)) {
    if (c.name !== 'openat' || c.ret === undefined || !/^\d+$/.test(c.ret)) continue;
    dsyncFds.set(Number(c.ret), /\bO_(D)?SYNC\b/.test(c.args));
  }
  return { calls, dsyncFds };
}

/**
 * For every i in 1..n: the problems that make "ACK i was written only after batch i was durable"
 * unproven by the trace. An empty list for every i is the property.
 */
function checkDurableBeforeAck(text: string, dataFile: string, n: number): { failures: Map<number, string[]>; syncs: number; acks: number } {
  const { calls, dsyncFds } = parseStrace(text);
  const marker = (kind: 'BEGIN' | 'ACK', i: number) =>
    calls.find((c) => c.name === 'write' && c.fd === 1 && new RegExp(`^1(<[^>]*>)?, "${kind} ${i}\\\\n"`).test(c.args));
  const isData = (c: Call) => c.fdPath === dataFile;
  const dataWrites = calls.filter((c) => ['pwrite64', 'pwritev', 'pwritev2', 'writev', 'write'].includes(c.name) && isData(c));
  const syncs = calls.filter((c) => (c.name === 'fdatasync' || c.name === 'fsync') && isData(c) && c.ret === '0');
  const failures = new Map<number, string[]>();
  let acks = 0;
  for (let i = 1; i <= n; i++) {
    const problems: string[] = [];
    const begin = marker('BEGIN', i);
    const ack = marker('ACK', i);
    if (!begin || !ack) {
      failures.set(i, [`BEGIN ${i} or ACK ${i} write not found in the trace`]);
      continue;
    }
    acks++;
    const inWindow = dataWrites.filter((w) => w.start > begin.end && w.start < ack.start);
    if (inWindow.length === 0) problems.push('no write to data.mdb between BEGIN and ACK (nothing committed before the ACK)');
    for (const w of inWindow) {
      if (w.end > ack.start) {
        problems.push(`${w.name} at line ${w.start + 1} had not returned when ACK was written`);
        continue;
      }
      if (dsyncFds.get(w.fd!) === true) continue; // O_DSYNC: durable when it returns
      const synced = syncs.some((s) => s.start > w.end && s.end < ack.start);
      if (!synced) problems.push(`${w.name} at line ${w.start + 1} (fd ${w.fd}) is not followed by a completed fdatasync/fsync before ACK ${i}`);
    }
    if (problems.length > 0) failures.set(i, problems);
  }
  return { failures, syncs: syncs.length, acks };
}

interface Traced {
  text: string;
  dataFile: string;
  stdout: string[];
}

async function traced(mode: string, args: string[]): Promise<Traced> {
  const dir = tempDir('actorloop-strace-');
  try {
    const traceFile = join(dir.path, 'trace.txt');
    const dbPath = join(dir.path, 'db');
    const child = spawnTs(STORE_CHILD, [mode, dbPath, ...args], {
      prefix: ['strace', '-f', '-ttt', '-y', '-e', `trace=${TRACED.join(',')}`, '-o', traceFile],
      label: `strace ${mode}`,
    });
    const exit = await child.waitExit(50_000);
    if (exit.code !== 0 || child.lines.at(-1) !== 'DONE') throw new Error(`traced child failed: ${child.describe()}`);
    return { text: readFileSync(traceFile, 'utf8'), dataFile: join(dbPath, 'data.mdb'), stdout: child.lines };
  } finally {
    await dir.cleanup();
  }
}

describe('durability before acknowledgement (strace)', () => {
  afterAll(killAllChildren);

  if (!hasStrace) {
    if (inCi) {
      it('needs strace', () => {
        expect.fail('strace is not on PATH, but CI=true: .ci/run must install strace (e.g. apt-get install -y strace)');
      });
    } else {
      it.skip('skipped: strace is not on PATH (install strace to run the durability-before-ack proof)', () => {});
    }
    return;
  }

  // The three traced children run concurrently (each spends a couple of seconds loading under
  // strace); each test awaits its own. `catch` keeps a failure from being an unhandled rejection
  // before its test awaits it.
  const runs: Record<string, Promise<Traced>> = {};
  const run = (name: string, mode: string, args: string[]) => {
    runs[name] = traced(mode, args);
    runs[name].catch(() => {});
  };
  beforeAll(() => {
    run('flushed', 'strace', [String(N)]);
    run('ack-early', 'strace', [String(N), '--ack-early']);
    run('nosync', 'strace-nosync', [String(N)]);
  });

  it(`flushes every append's commit before it is acknowledged (${N} appends)`, async () => {
    const { text, dataFile, stdout } = await runs.flushed!;
    expect(stdout.filter((l) => l.startsWith('ACK '))).toHaveLength(N);
    const { failures, syncs, acks } = checkDurableBeforeAck(text, dataFile, N);
    expect(acks).toBe(N);
    expect(Object.fromEntries(failures)).toEqual({});
    expect(syncs).toBeGreaterThanOrEqual(N);
  });

  it('the check fails for a writer that acknowledges before awaiting the append', async () => {
    const { text, dataFile } = await runs['ack-early']!;
    const { failures, acks } = checkDurableBeforeAck(text, dataFile, N);
    expect(acks).toBe(N);
    expect(failures.size).toBe(N);
    expect(failures.get(1)!.join()).toMatch(/no write to data\.mdb between BEGIN and ACK/);
  });

  it('the check fails for an LMDB environment opened with noSync (fewer syncs than acks)', async () => {
    const { text, dataFile } = await runs.nosync!;
    const { failures, syncs, acks } = checkDurableBeforeAck(text, dataFile, N);
    expect(acks).toBe(N);
    expect(syncs).toBeLessThan(acks);
    expect(failures.size).toBe(N);
    expect(failures.get(1)!.join()).toMatch(/not followed by a completed fdatasync\/fsync/);
  });
});

