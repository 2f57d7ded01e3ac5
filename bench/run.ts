/**
 * Runs the benchmarks: `npm run bench` (all) or `npm run bench -- store` (those whose file or
 * function name contains "store").
 *
 * Every module in bench/ except this runner and the helpers is a bench module; each exported
 * function named `bench<Name>` is one bench, run in sequence, one at a time (they measure the
 * disk, so they must not overlap). To add one, create e.g. bench/loop.ts exporting
 * `async function benchLoop(): Promise<void>` — nothing here needs to change.
 *
 * Benches put their files under the directory in `ACTORLOOP_BENCH_TMP` (made here, inside the
 * repo's `.tmp/` so that it is on the repo's filesystem, and removed when the run ends).
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = dirname(here);
/** Not bench modules (verify.ts is a script of its own, `npx tsx bench/verify.ts`: importing it runs it). */
const HELPERS = new Set([
  'run.ts',
  'table.ts',
  'strace.ts',
  'serve-probe.ts',
  'serve-server.ts',
  'serve-old.ts',
  'verify.ts',
  'ratelimit-server.ts',
  'ratelimit-worker.ts',
]);
/** Run first, in this order; any other bench module runs after them, alphabetically. */
const ORDER = ['store', 'loop'];

type Bench = { module: string; name: string; run: () => Promise<void> };

async function discover(): Promise<Bench[]> {
  const files = readdirSync(here)
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && !f.endsWith('.test.ts') && !HELPERS.has(f) && !f.startsWith('_'))
    .map((f) => basename(f, '.ts'))
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const benches: Bench[] = [];
  for (const module of files) {
    const mod = (await import(pathToFileURL(join(here, `${module}.ts`)).href)) as Record<string, unknown>;
    for (const [name, value] of Object.entries(mod)) {
      if (/^bench[A-Z0-9]/.test(name) && typeof value === 'function') {
        benches.push({ module, name, run: value as () => Promise<void> });
      }
    }
  }
  return benches;
}

function rank(module: string): number {
  const i = ORDER.indexOf(module);
  return i === -1 ? ORDER.length : i;
}

async function main(): Promise<number> {
  const filter = process.argv
    .slice(2)
    .find((a) => !a.startsWith('-'))
    ?.toLowerCase();
  const all = await discover();
  const selected = filter ? all.filter((b) => b.module.toLowerCase().includes(filter) || b.name.toLowerCase().includes(filter)) : all;
  if (selected.length === 0) {
    console.error(`no bench matches "${filter}"; available: ${all.map((b) => `${b.module} (${b.name})`).join(', ')}`);
    return 1;
  }

  mkdirSync(join(repo, '.tmp'), { recursive: true });
  const tmp = mkdtempSync(join(repo, '.tmp', 'bench-'));
  process.env.ACTORLOOP_BENCH_TMP = tmp;
  const cleanup = () => rmSync(tmp, { recursive: true, force: true });
  const onSignal = (signal: NodeJS.Signals) => {
    cleanup();
    process.kill(process.pid, signal);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  const started = performance.now();
  let failed = 0;
  try {
    for (const bench of selected) {
      console.log(`\n## ${bench.module}: ${bench.name}\n`);
      const t0 = performance.now();
      try {
        await bench.run();
      } catch (e) {
        failed++;
        console.error(`bench ${bench.name} failed:`, e);
      }
      console.log(`\n(${bench.name}: ${((performance.now() - t0) / 1000).toFixed(1)} s)`);
    }
  } finally {
    cleanup();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  console.log(`\nall benches: ${((performance.now() - started) / 1000).toFixed(1)} s${failed ? `, ${failed} failed` : ''}`);
  return failed ? 1 : 0;
}

process.exitCode = await main();
