/**
 * The long fuzz run: `npm run fuzz -- --runs N [--seed S] [--path P] [--case-ms MS] [file filter]`.
 * Runs every property in test/fuzz with N cases each (no time limit) and prints per property its
 * cases and time; a failure prints its seed and path, replayed with the same --seed and --path.
 */
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  options: { runs: { type: 'string', default: '1000' }, seed: { type: 'string' }, path: { type: 'string' }, 'case-ms': { type: 'string' } },
  allowPositionals: true,
});
const env: NodeJS.ProcessEnv = { ...process.env, FUZZ_RUNS: values.runs };
if (values.seed !== undefined) env.FUZZ_SEED = values.seed;
if (values.path !== undefined) env.FUZZ_PATH = values.path;
if (values['case-ms'] !== undefined) env.FUZZ_CASE_MS = values['case-ms'];
const t0 = Date.now();
const r = spawnSync('npx', ['vitest', 'run', '--testTimeout', '0', ...(positionals.length ? positionals : ['test/fuzz'])], {
  stdio: 'inherit',
  env,
});
console.log(`[fuzz] ${values.runs} runs per property, ${Math.round((Date.now() - t0) / 1000)} s in all`);
process.exit(r.status ?? 1);
