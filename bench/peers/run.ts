/**
 * The peer benchmark (issue 22): `npm run bench:peers` (full: K=50, K=200, 200 sessions × K=5
 * with 20 in flight, and K=50 with 5 ms model / 1 ms tool latency; warm-up ≥ 2 repetitions and
 * ≥ 2,500 steps, then 7 repetitions)
 * or `npm run bench:peers -- --quick` (smaller K, fewer repetitions: a couple of minutes).
 * `--only=<row,row>` picks rows (see rows.ts). Every (row, variant) runs in a child process of its
 * own; the rows of one variant run one after the other, never at once. Prints a Markdown table.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fmt, median, printTable } from '../table.js';
import { ROWS } from './rows.js';
import type { Variant } from './workload.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = dirname(dirname(here));
const quick = process.argv.includes('--quick');
const only = process.argv
  .find((a) => a.startsWith('--only='))
  ?.slice('--only='.length)
  .split(',');
const WARMUPS = quick ? 1 : 2;
const REPS = quick ? 3 : 7;
/** Warm-up model steps per process, at least (bench/loop: V8 needs ~2,500 steps to optimise the loop). */
const WARM_STEPS = quick ? 300 : 2500;
const BASE = 'actorloop-memory';

const plain = { sessions: 1, inFlight: 1, modelMs: 0, toolMs: 0 };
const VARIANTS: { key: string; title: string; v: Variant }[] = quick
  ? [
      { key: 'k20', title: 'K=20', v: { k: 20, ...plain } },
      { key: 'k50', title: 'K=50', v: { k: 50, ...plain } },
      { key: 'many', title: '40 sessions × K=5, 8 in flight', v: { k: 5, sessions: 40, inFlight: 8, modelMs: 0, toolMs: 0 } },
      { key: 'lat', title: 'K=20, model 5 ms, tools 1 ms', v: { k: 20, sessions: 1, inFlight: 1, modelMs: 5, toolMs: 1 } },
    ]
  : [
      { key: 'k50', title: 'K=50', v: { k: 50, ...plain } },
      { key: 'k200', title: 'K=200', v: { k: 200, ...plain } },
      { key: 'many', title: '200 sessions × K=5, 20 in flight', v: { k: 5, sessions: 200, inFlight: 20, modelMs: 0, toolMs: 0 } },
      { key: 'lat', title: 'K=50, model 5 ms, tools 1 ms', v: { k: 50, sessions: 1, inFlight: 1, modelMs: 5, toolMs: 1 } },
    ];

type Result = { samples: number[]; peakRssKb: number } | { skip: string } | { error: string };

function runRow(row: string, v: Variant, dir: string): Result {
  const child = spawnSync(
    process.execPath,
    ['--import', 'tsx', join(here, 'row.ts'), row, JSON.stringify(v), String(WARMUPS), String(REPS), dir, String(WARM_STEPS)],
    {
      cwd: here,
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      timeout: 30 * 60_000,
    },
  );
  const line = child.stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .at(-1);
  if (line) return JSON.parse(line) as Result;
  return { error: `child exited ${child.status ?? child.signal}: ${child.stderr.trim().split('\n').slice(-3).join(' / ')}` };
}

const rows = [...ROWS.keys()].filter((r) => !only || only.includes(r) || r === BASE);
mkdirSync(join(repo, '.tmp'), { recursive: true });
const tmp = mkdtempSync(join(repo, '.tmp', 'bench-peers-'));
const results = new Map<string, Result>();
const started = performance.now();
const load0 = loadavg()[0]!;
let commit = '?';
try {
  commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: repo, encoding: 'utf8' }).trim();
} catch {}
try {
  for (const { key, title, v } of VARIANTS) {
    for (const row of rows) {
      const t0 = performance.now();
      const r = runRow(row, v, join(tmp, `${row}-${key}`));
      results.set(`${row}|${key}`, r);
      const what = 'samples' in r ? `median ${fmt(median(r.samples))} µs/step` : 'skip' in r ? `skipped: ${r.skip}` : `FAILED: ${r.error}`;
      console.error(`[${fmt((performance.now() - t0) / 1000, 1)} s] ${title} · ${row}: ${what}`);
    }
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}

const cell = (row: string, key: string): string => {
  const r = results.get(`${row}|${key}`);
  if (!r) return '-';
  if ('skip' in r) return 'skipped';
  if ('error' in r) return 'FAILED';
  const base = results.get(`${BASE}|${key}`);
  const ratio = base && 'samples' in base ? ` (${fmt(median(r.samples) / median(base.samples), 2)}×)` : '';
  return `${fmt(median(r.samples))} [${fmt(Math.min(...r.samples))}–${fmt(Math.max(...r.samples))}]${ratio}`;
};
const rss = (row: string): string => {
  const kb = VARIANTS.map(({ key }) => results.get(`${row}|${key}`)).flatMap((r) => (r && 'samples' in r ? [r.peakRssKb] : []));
  return kb.length ? fmt(Math.max(...kb) / 1024) : '-';
};

console.log(
  `\n### bench/peers${quick ? ' --quick' : ''} — commit ${commit}, ${cpus().length} CPUs, load ${fmt(load0, 2)} at start / ${fmt(loadavg()[0], 2)} at end, node ${process.version}, ${fmt((performance.now() - started) / 1000)} s\n`,
);
console.log(
  `µs per step: median [min–max] of ${REPS} repetitions after warm-up (≥ ${WARMUPS} repetitions and ≥ ${WARM_STEPS} steps), each row in its own process; (×) = ratio to actorloop on the memory store in the same run. Peak RSS: the largest over the row's processes.\n`,
);
printTable(
  ['system', ...VARIANTS.map((x) => x.title), 'peak RSS MB', 'durable'],
  rows.map((row) => [ROWS.get(row)!.label, ...VARIANTS.map((x) => cell(row, x.key)), rss(row), ROWS.get(row)!.durable ? 'yes' : 'no']),
  ['left', ...VARIANTS.map(() => 'right' as const), 'right', 'left'],
);
const notes = [...results].flatMap(([k, r]) =>
  'skip' in r
    ? [`- ${k.replace('|', ' / ')}: skipped — ${r.skip}`]
    : 'error' in r
      ? [`- ${k.replace('|', ' / ')}: FAILED — ${r.error}`]
      : [],
);
if (notes.length) console.log(`\n${notes.join('\n')}`);
if ([...results.values()].some((r) => 'error' in r)) process.exitCode = 1;
