/**
 * One row of the peer benchmark in a process of its own: `node --import tsx row.ts <row> <variant
 * JSON> <warmups> <reps> <dir> [<warm-up steps>]`. Sets the row up, runs unmeasured repetitions
 * (at least `warmups`, and enough to take `warm-up steps` model steps, so that V8 has optimised
 * the hot code before measuring), then `reps` measured ones, and prints one JSON line: µs per step of each repetition and the
 * process's peak RSS — or `{ skip }` / `{ error }`.
 */
import { mkdirSync } from 'node:fs';
import { ROWS } from './rows.js';
import type { Variant } from './workload.js';

const [name, variantJson, warmupArg, reps, dir, warmSteps] = process.argv.slice(2);
const entry = ROWS.get(name ?? '');
if (!entry || !variantJson || !warmupArg || !reps || !dir) {
  console.error(`usage: row.ts <${[...ROWS.keys()].join('|')}> <variant JSON> <warmups> <reps> <dir>`);
  process.exit(2);
}
const v = JSON.parse(variantJson) as Variant;
const warmups = Math.max(Number(warmupArg), Math.ceil(Number(warmSteps ?? 0) / (v.k * v.sessions)));
mkdirSync(dir, { recursive: true });
try {
  const row = await entry.make(v, dir);
  if ('skip' in row) {
    console.log(JSON.stringify({ skip: row.skip }));
  } else {
    const steps = v.k * v.sessions;
    const samples: number[] = [];
    for (let i = 0; i < Number(warmups) + Number(reps); i++) {
      const t0 = performance.now();
      await row.rep(i);
      const us = ((performance.now() - t0) * 1000) / steps;
      if (i >= Number(warmups)) samples.push(us);
    }
    await row.close();
    console.log(JSON.stringify({ samples, peakRssKb: process.resourceUsage().maxRSS }));
  }
} catch (e) {
  console.log(JSON.stringify({ error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }));
  process.exitCode = 1;
}
