/**
 * bench/verify: what `verifyStore` costs on a large store, and how that splits between the walk
 * of the records and journal (verify-walk.ts) and the reader's and writer's paths exercised in a
 * throwaway copy of data.mdb (verify-exercise.ts). The store is built in a temp dir
 * (`ACTORLOOP_BENCH_TMP`, else the system's) in large appends: `BENCH_VERIFY_SESSIONS` sessions
 * (10,000) of `BENCH_VERIFY_EVENTS` user messages (20) of `BENCH_VERIFY_SIZE` characters (400),
 * about 200 MB of data.mdb. The two phases are timed from the child's own lines (`walked`, then
 * `result`); `verifyStore` end to end is timed once more on its own. `BENCH_VERIFY_KEEP=<dir>`
 * builds the store there and keeps it (to time another build's `actorloop verify <dir>` on it).
 *
 *   npx tsx bench/verify.ts
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { lmdbStore, verifyStore } from '../src/index.js';
import type { EventDraft } from '../src/contracts/events.js';
import { fmt, printTable } from './table.js';

const SESSIONS = Number(process.env.BENCH_VERIFY_SESSIONS ?? 10_000);
const EVENTS = Number(process.env.BENCH_VERIFY_EVENTS ?? 20);
const SIZE = Number(process.env.BENCH_VERIFY_SIZE ?? 400);
const IN_FLIGHT = 64;

const kept = process.env.BENCH_VERIFY_KEEP; // a path: the store is built there and kept (to time another build's verify on it)
const root = kept ?? mkdtempSync(join(process.env.ACTORLOOP_BENCH_TMP ?? tmpdir(), 'actorloop-bench-verify-'));
const path = kept ?? join(root, 'store');
try {
  let t = performance.now();
  await build(path);
  const buildMs = performance.now() - t;
  const mb = statSync(join(path, 'data.mdb')).size / 1e6;
  const phases = await childPhases(path);
  t = performance.now();
  const report = await verifyStore(path);
  const totalMs = performance.now() - t;
  if (!report.ok) throw new Error(`the bench store does not verify: ${JSON.stringify(report.problems.slice(0, 3))}`);
  console.log(
    `store: ${fmt(SESSIONS)} sessions × ${EVENTS} events of ${SIZE} characters, data.mdb ${fmt(mb)} MB (built in ${fmt(buildMs / 1000, 1)} s)`,
  );
  printTable(
    ['phase', 'seconds'],
    [
      ['child start and the walk of records, ids, chunks, journal (verify before this change)', phases.walkMs / 1000],
      ['the paths of readers and writers in a copy of data.mdb (added)', phases.exerciseMs / 1000],
      ['verifyStore end to end (a second run)', totalMs / 1000],
    ].map(([a, b]) => [a as string, fmt(b as number, 1)]),
  );
} finally {
  if (!kept) rmSync(root, { recursive: true, force: true });
}

/** `SESSIONS` sessions of `EVENTS` messages each, one append per session, `IN_FLIGHT` sessions at a time (group commit). */
async function build(at: string): Promise<void> {
  const store = lmdbStore({ path: at });
  try {
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < SESSIONS; i = next++) {
        const s = `session-${i}`;
        const { writerEpoch } = await store.attachWriter(s);
        const drafts: EventDraft[] = [];
        for (let j = 1; j <= EVENTS; j++)
          drafts.push({
            type: 'user/message',
            turn: 1,
            step: 1,
            attempt: 1,
            surfaceOp: 'append',
            payload: { message: { role: 'user', content: `${s}-${j} ${'x'.repeat(SIZE)}` } },
          });
        await store.append(s, writerEpoch, 1, drafts);
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  } finally {
    await store.close();
  }
}

/** Runs verifyStore's child directly and times its two phases by the lines it prints. */
async function childPhases(at: string): Promise<{ walkMs: number; exerciseMs: number }> {
  const script = resolve(dirname(fileURLToPath(import.meta.url)), '../src/persistence/verify-child.ts');
  const scratch = mkdtempSync(join(tmpdir(), 'actorloop-bench-verify-copy-'));
  try {
    const start = performance.now();
    let walked = 0;
    let done = 0;
    const child = spawn(process.execPath, ['--import', 'tsx', script, at, scratch], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, NODE_OPTIONS: '' },
    });
    let partial = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        if (line.startsWith('{"walked"')) walked = performance.now();
        if (line.startsWith('{"result"')) done = performance.now();
      }
    });
    const code = await new Promise<number | null>((res) => child.on('close', res));
    if (code !== 0 || !walked || !done) throw new Error(`the verifying child exited with ${code}`);
    return { walkMs: walked - start, exerciseMs: done - walked };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
