/**
 * Shared by the crash tests and their child program (test/crash/store-child.ts): how a batch's
 * drafts are derived from its position (so the parent can check a batch's exact content from its
 * ACK line alone), how children are spawned, and how their stdout lines are awaited.
 *
 * This module must not import vitest: the child imports it too.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnSyncReturns } from 'node:child_process';
import { rmSync, writeFileSync, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EventDraft, EventRecord } from '../../src/contracts/events.js';
import { canonicalJson } from '../../src/persistence/codec.js';
import { scaled } from '../helpers/load.js';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const STORE_CHILD = join(REPO_ROOT, 'test/crash/store-child.ts');

// ---------------------------------------------------------------------------------------------
// Batches: every draft carries its batch id, the batch size and its index in the batch.

/** A batch id unique per session: the writer epoch and the writer's own batch counter. */
export const batchIdOf = (writerEpoch: number, n: number): string => `${writerEpoch}.${n}`;

export const eventIdOf = (sessionId: string, seq: number): string => `${sessionId}:${seq}`;

/**
 * The drafts of one batch. Everything is derived from (session, batch id, first seq, size), so
 * the parent can rebuild the exact expected content of an acknowledged batch.
 */
export function batchDrafts(sessionId: string, batchId: string, firstSeq: number, size: number): EventDraft[] {
  const drafts: EventDraft[] = [];
  for (let i = 0; i < size; i++) {
    const seq = firstSeq + i;
    const common = { eventId: eventIdOf(sessionId, seq), turn: 1, step: 1 + (seq % 7), attempt: 1 };
    const meta = { batch: batchId, batchSize: size, batchIndex: i };
    drafts.push(
      i % 2 === 0
        ? {
            ...common,
            type: 'user/message',
            surfaceOp: 'append',
            payload: { ...meta, message: { role: 'user', content: `${sessionId} batch ${batchId} #${i}/${size}` } },
          }
        : { ...common, type: 'step/start', surfaceOp: 'none', payload: meta },
    );
  }
  return drafts;
}

/** A random batch size in 1..5 (Math.random is fine: the content does not depend on it). */
export const randomBatchSize = (): number => 1 + Math.floor(Math.random() * 5);

export interface Ack {
  sessionId: string;
  firstSeq: number;
  lastSeq: number;
  batchId: string;
}

/** Parses `ACK <session> <firstSeq> <lastSeq> <batchId>`. */
export function parseAck(line: string): Ack | undefined {
  const m = /^ACK (\S+) (\d+) (\d+) (\S+)$/.exec(line);
  if (!m) return undefined;
  return { sessionId: m[1]!, firstSeq: Number(m[2]), lastSeq: Number(m[3]), batchId: m[4]! };
}

/** Parses `ATTACHED <session> <epoch> <lastSeq>`. */
export function parseAttached(line: string): { sessionId: string; writerEpoch: number; lastSeq: number } | undefined {
  const m = /^ATTACHED (\S+) (\d+) (\d+)$/.exec(line);
  if (!m) return undefined;
  return { sessionId: m[1]!, writerEpoch: Number(m[2]), lastSeq: Number(m[3]) };
}

const epochOfBatch = (batchId: string): number => Number(batchId.split('.')[0]);

/**
 * Checks one session's log as read back from `fromSeq` (a batch boundary) to its end: seq
 * contiguous, every batch complete and in order (all of its drafts or none), every record exactly
 * the draft its batch derives, written with the epoch named in its batch id, and every
 * acknowledged batch at or after `fromSeq` present at its seqs. Returns the problems found (empty
 * when the log is sound) and where the log ends.
 */
export function checkBatchLog(
  sessionId: string,
  events: readonly EventRecord[],
  acks: readonly Ack[],
  { fromSeq = 1 }: { fromSeq?: number } = {},
): { problems: string[]; lastSeq: number } {
  const problems: string[] = [];
  const report = (p: string) => {
    if (problems.length < 20) problems.push(p);
  };
  events.forEach((e, i) => {
    if (e.seq !== fromSeq + i) report(`${sessionId}: position ${i} holds seq ${e.seq} (expected ${fromSeq + i}: seq not contiguous)`);
  });
  let i = 0;
  while (i < events.length) {
    const first = events[i]!;
    const batchId = String(first.payload.batch);
    const size = Number(first.payload.batchSize);
    if (first.payload.batchIndex !== 0 || !(size >= 1 && size <= 5)) {
      report(
        `${sessionId}#${first.seq}: does not start a batch (batch ${batchId}, index ${String(first.payload.batchIndex)}, size ${size})`,
      );
      i++;
      continue;
    }
    const got = events.slice(i, i + size);
    if (got.length < size) report(`${sessionId}: batch ${batchId} at seq ${first.seq} is partial: ${got.length} of ${size} events`);
    const expected = batchDrafts(sessionId, batchId, first.seq, size);
    got.forEach((e, k) => {
      const d = expected[k]!;
      const want = {
        eventId: d.eventId,
        type: d.type,
        turn: d.turn,
        step: d.step,
        attempt: d.attempt,
        surfaceOp: d.surfaceOp,
        payload: d.payload,
        writerEpoch: epochOfBatch(batchId),
        sessionId,
        schemaVersion: '1',
      };
      const have = {
        eventId: e.eventId,
        type: e.type,
        turn: e.turn,
        step: e.step,
        attempt: e.attempt,
        surfaceOp: e.surfaceOp,
        payload: e.payload,
        writerEpoch: e.writerEpoch,
        sessionId: e.sessionId,
        schemaVersion: e.schemaVersion,
      };
      if (canonicalJson(have) !== canonicalJson(want))
        report(
          `${sessionId}#${e.seq}: content differs from batch ${batchId} draft ${k}: ${JSON.stringify(have)} vs ${JSON.stringify(want)}`,
        );
    });
    i += Math.max(1, got.length);
  }
  const lastSeq = events.length === 0 ? fromSeq - 1 : events[events.length - 1]!.seq;
  const at = (seq: number) => events[seq - fromSeq];
  for (const a of acks) {
    if (a.sessionId !== sessionId || a.firstSeq < fromSeq) continue;
    const first = at(a.firstSeq);
    const last = at(a.lastSeq);
    if (!first || !last) {
      report(`${sessionId}: acknowledged batch ${a.batchId} (seq ${a.firstSeq}..${a.lastSeq}) is missing; log ends at ${lastSeq}`);
      continue;
    }
    const size = a.lastSeq - a.firstSeq + 1;
    if (
      first.payload.batch !== a.batchId ||
      first.payload.batchIndex !== 0 ||
      first.payload.batchSize !== size ||
      last.payload.batch !== a.batchId
    ) {
      report(
        `${sessionId}: acknowledged batch ${a.batchId} (seq ${a.firstSeq}..${a.lastSeq}) is not what is stored there (${String(first.payload.batch)})`,
      );
    }
  }
  return { problems, lastSeq };
}

// ---------------------------------------------------------------------------------------------
// Children

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/**
 * A spawned child whose stdout is split into lines. `waitFor` resolves with the first line (seen
 * so far or later) matching a predicate, and rejects — naming what was awaited and showing the
 * child's output — on timeout or if the child exits first.
 */
export class ChildRun {
  readonly lines: string[] = [];
  stderr = '';
  readonly exited: Promise<ExitInfo>;
  exit: ExitInfo | undefined;
  private partial = '';
  private waiters: Array<() => void> = [];

  constructor(
    readonly proc: ChildProcess,
    readonly label: string,
  ) {
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => {
      const parts = (this.partial + chunk).split('\n');
      this.partial = parts.pop()!;
      for (const p of parts) this.lines.push(p);
      this.wake();
    });
    proc.stderr!.setEncoding('utf8');
    proc.stderr!.on('data', (chunk: string) => {
      if (this.stderr.length < 20_000) this.stderr += chunk;
    });
    // 'close' fires after the exit and after stdout/stderr are drained: every line is in.
    this.exited = new Promise<ExitInfo>((res) => {
      proc.on('close', (code, signal) => {
        if (this.partial) this.lines.push(this.partial);
        this.partial = '';
        this.exit = { code, signal };
        res(this.exit);
        this.wake();
      });
    });
  }

  private wake(): void {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  /** Lines seen so far, for failure messages. */
  describe(): string {
    const tail = this.lines.slice(-15).join('\n');
    return `${this.label} (pid ${this.proc.pid}, exit ${JSON.stringify(this.exit ?? null)})\n--- last stdout lines ---\n${tail}\n--- stderr ---\n${this.stderr.slice(-4000)}`;
  }

  waitFor(pred: (line: string) => boolean, quietTimeoutMs: number, what: string, from = 0): Promise<string> {
    const timeoutMs = scaled(quietTimeoutMs); // the timeout on a quiet machine, stretched by the load (test/helpers/load.ts)
    return new Promise<string>((res, rej) => {
      const timer = setTimeout(() => {
        check.cancelled = true;
        rej(new Error(`timed out after ${timeoutMs} ms waiting for ${what} from ${this.describe()}`));
      }, timeoutMs);
      const check = Object.assign(
        () => {
          if (check.cancelled) return;
          const found = this.lines.slice(from).find(pred);
          if (found !== undefined) {
            clearTimeout(timer);
            res(found);
          } else if (this.exit) {
            clearTimeout(timer);
            rej(new Error(`child exited before ${what}: ${this.describe()}`));
          } else this.waiters.push(check);
        },
        { cancelled: false },
      );
      check();
    });
  }

  /** Writes one line to the child's stdin (children that wait for a cue read it). */
  send(line: string): void {
    this.proc.stdin!.write(`${line}\n`);
  }

  signal(sig: NodeJS.Signals): void {
    if (this.exit === undefined) this.proc.kill(sig);
  }

  /** Waits for the exit, SIGKILLing the child if it takes longer than `timeoutMs`. */
  async waitExit(quietTimeoutMs: number): Promise<ExitInfo> {
    const timeoutMs = scaled(quietTimeoutMs);
    let timer: NodeJS.Timeout | undefined;
    const killed = new Promise<'timeout'>((res) => {
      timer = setTimeout(() => res('timeout'), timeoutMs);
    });
    const r = await Promise.race([this.exited, killed]);
    clearTimeout(timer);
    if (r === 'timeout') {
      this.proc.kill('SIGKILL');
      await this.exited;
      throw new Error(`${this.label} did not exit within ${timeoutMs} ms (killed): ${this.describe()}`);
    }
    return r;
  }
}

const live = new Set<ChildRun>();

/**
 * Spawns `node --import tsx <script> ...args` from the repo root (so `tsx` resolves from the
 * project's devDependencies). `prefix` runs it under another program, e.g. strace.
 */
export function spawnTs(script: string, args: readonly string[], options: { prefix?: readonly string[]; label?: string } = {}): ChildRun {
  // `--conditions=actorloop-source`: an `import 'actorloop'` (the examples) runs src/, not dist/ (docs/packaging.md)
  const nodeArgs = ['--conditions=actorloop-source', '--import', 'tsx', script, ...args];
  const [cmd, ...cmdArgs] = options.prefix ? [...options.prefix, process.execPath, ...nodeArgs] : [process.execPath, ...nodeArgs];
  const proc = spawn(cmd!, cmdArgs, { cwd: REPO_ROOT, stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, NODE_OPTIONS: '' } });
  const run = new ChildRun(proc, options.label ?? `${script.split('/').pop()} ${args.join(' ')}`);
  live.add(run);
  void run.exited.then(() => live.delete(run));
  return run;
}

/** Spawns the store child program in `mode`. */
export const spawnStoreChild = (mode: string, args: readonly string[], label?: string): ChildRun =>
  spawnTs(STORE_CHILD, [mode, ...args], { label: label ?? `store-child ${mode}` });

/** SIGKILLs every child still running (for afterEach: a failed test must not leave orphans). */
export async function killAllChildren(): Promise<void> {
  const runs = [...live];
  for (const r of runs) {
    r.signal('SIGCONT');
    r.signal('SIGKILL');
  }
  await Promise.all(runs.map((r) => r.exited));
}

export async function withTimeout<T>(p: Promise<T>, quietMs: number, what: string): Promise<T> {
  const ms = scaled(quietMs);
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, rej) => {
    timer = setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Number of rounds for a repeated crash test: `ACTORLOOP_CRASH_ROUNDS` if set, else `fallback`. */
export function crashRounds(fallback: number): number {
  const n = Number(process.env.ACTORLOOP_CRASH_ROUNDS);
  return Number.isInteger(n) && n > 0 ? n : fallback;
}

/** One protocol line, written with a synchronous write(2) so that it is out before the next step. */
/** Runs a child process's `main`: exit 0 when it resolves; `ERROR <stack on one line>` and exit 1 when it throws. */
export function runChild(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (e: unknown) => {
      say(`ERROR ${(e as Error)?.stack?.replace(/\n/g, ' | ') ?? String(e)}`);
      process.exit(1);
    },
  );
}

export function say(line: string): void {
  let buf = Buffer.from(`${line}\n`);
  while (buf.length > 0) {
    try {
      buf = buf.subarray(writeSync(1, buf));
    } catch (e) {
      // A full non-blocking pipe: wait a moment for the parent to read, then retry.
      if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2);
    }
  }
}

const inbox: string[] = [];
let inboxWaiters: (() => void)[] = [];
let stdinOn = false;
/** Resolves with (and consumes) the first stdin line matching `pred`. Exits if stdin closes first. */
export async function nextLine(pred: (line: string) => boolean): Promise<string> {
  if (!stdinOn) {
    stdinOn = true;
    let buf = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (chunk: string) => {
      buf += chunk;
      const parts = buf.split('\n');
      buf = parts.pop()!;
      inbox.push(...parts.map((p) => p.trim()));
      const ws = inboxWaiters;
      inboxWaiters = [];
      for (const w of ws) w();
    });
    // The parent is gone: nobody will ever send the cue, do not linger as an orphan.
    process.stdin.on('end', () => process.exit(3));
  }
  for (;;) {
    const i = inbox.findIndex(pred);
    if (i >= 0) return inbox.splice(i, 1)[0]!;
    await new Promise<void>((r) => inboxWaiters.push(r));
  }
}

/**
 * Runs `lmdbStore({ path, bootId })` in a child process whose `node:fs` is first patched by
 * `patch` (JS source, with `fs` in scope), e.g. to SIGKILL itself at an exact write. Prints
 * OPENED or FAILED <code> <message>; the script is written beside `path` and removed afterwards.
 */
export function childOpen(path: string, bootId: string, patch: string): SpawnSyncReturns<string> {
  const script = join(path, '..', `child-open-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}.mts`);
  writeFileSync(
    script,
    `import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
${patch}
syncBuiltinESMExports();
const { lmdbStore } = await import(${JSON.stringify(join(REPO_ROOT, 'src/persistence/lmdb-store.ts'))});
try {
  const s = lmdbStore({ path: ${JSON.stringify(path)}, bootId: ${JSON.stringify(bootId)} });
  await s.close();
  console.log('OPENED');
} catch (e) {
  console.log('FAILED ' + (e && e.code ? e.code + ' ' : '') + String(e && e.message));
}
`,
  );
  try {
    return spawnSync(process.execPath, ['--import', 'tsx', script], {
      cwd: REPO_ROOT,
      env: { ...process.env, NODE_OPTIONS: '' },
      encoding: 'utf8',
      timeout: scaled(60_000),
    });
  } finally {
    rmSync(script, { force: true });
  }
}

/** Waits until `pred` holds, polling every `pollMs`; past `ms` (scaled by the load factor) it throws naming `what`. */
export async function until(pred: () => boolean | Promise<boolean>, ms: number, what: string, pollMs = 100): Promise<void> {
  const deadline = Date.now() + scaled(ms);
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
}
