/**
 * The sweep behind test/persistence/verify-finds-fatal-damage.test.ts: builds a varied LMDB store
 * (fixtures/page-flips.ts), and for each seeded single-bit flip of a page header, in a copy of
 * the store, runs a reader and writer (fixtures/store-user.ts) in a child process, and
 * `verifyStore` on another copy. It prints every flip whose reader or writer died by a signal,
 * and counts those `verifyStore` called sound (which must be none). With `--repair`, it also
 * runs `repairStore` on those copies and reads them back.
 *
 *   npx tsx test/persistence/page-flips-sweep.ts [--seed 1] [--per-field 1] [--sample N] [--concurrency 2] [--repair]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { repairStore, verifyStore } from '../../src/persistence/verify.js';
import { killAllChildren } from '../crash/child-util.js';
import { describeFlip, flippedCopy, headerFlips, pagesOf, prng, writeVariedStore, type Flip } from './fixtures/page-flips.js';
import { useInChild } from './fixtures/page-flips-child.js';

const { values } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    'per-field': { type: 'string', default: '1' },
    concurrency: { type: 'string', default: '2' },
    sample: { type: 'string' },
    repair: { type: 'boolean', default: false },
  },
});
const root = mkdtempSync(join(tmpdir(), 'actorloop-sweep-'));
try {
  const base = join(root, 'base');
  const expected = await writeVariedStore(base);
  const all = headerFlips(pagesOf(base), Number(values.seed), Number(values['per-field']));
  const flips = values.sample === undefined ? all : sample(all, Number(values.sample), prng(Number(values.seed)));
  console.log(`${pagesOf(base)} pages, ${flips.length} flips (seed ${values.seed})`);
  let fatal = 0;
  let missed = 0;
  let unrepaired = 0;
  let n = 0;
  const one = async (flip: Flip, i: number) => {
    const dir = join(root, `f${i}`);
    flippedCopy(base, join(dir, 'verify'), flip);
    flippedCopy(base, join(dir, 'use'), flip);
    const [use, report] = await Promise.all([useInChild(join(dir, 'use')), verifyStore(join(dir, 'verify'))]);
    if (use.exit.signal) {
      fatal++;
      const line = `${describeFlip(flip)}: the ${use.phase} phase died of ${use.exit.signal}; verify ${report.ok ? 'says ok' : `says ${report.problems[0]!.reason.slice(0, 100)}`}`;
      if (report.ok) missed++;
      console.log(`${report.ok ? 'MISSED ' : 'found  '}${line}`);
      if (values.repair && !report.ok) {
        let back;
        try {
          await repairStore(join(dir, 'verify'));
          back = await useInChild(join(dir, 'verify'), 'read');
        } catch (e) {
          back = { exit: { code: 1, signal: null }, error: String(e) } as const;
        }
        if (JSON.stringify(back.read) !== JSON.stringify(expected)) {
          unrepaired++;
          console.log(`  repair did not restore every event: ${JSON.stringify(back).slice(0, 300)}`);
        }
      }
    }
    rmSync(dir, { recursive: true, force: true });
    if (++n % 50 === 0) console.log(`… ${n}/${flips.length}`);
  };
  const queue = flips.map((f, i) => [f, i] as const);
  await Promise.all(
    Array.from({ length: Number(values.concurrency) }, async () => {
      for (let next = queue.shift(); next; next = queue.shift()) await one(...next);
    }),
  );
  console.log(
    `${flips.length} flips: ${fatal} killed a reader or writer, ${missed} of them verifyStore called sound${values.repair ? `, ${unrepaired} not repaired` : ''}`,
  );
  process.exitCode = missed > 0 || unrepaired > 0 ? 1 : 0;
} finally {
  await killAllChildren();
  rmSync(root, { recursive: true, force: true });
}

/** `n` of `flips`, picked by `next`, in their order. */
function sample(flips: Flip[], n: number, next: () => number): Flip[] {
  const picked = new Set<number>();
  while (picked.size < Math.min(n, flips.length)) picked.add(Math.floor(next() * flips.length));
  return [...picked].sort((a, b) => a - b).map((i) => flips[i]!);
}
