/**
 * `npm run torture [N]`: the SIGKILL torture harness (test/crash/torture-lib.ts) for N kills
 * (argv, else TORTURE_KILLS, else 500). Prints the figures as a table and every violation; exits
 * 1 on any violation. TORTURE_KEEP=1 keeps the directory (log + ledgers) of a trial with violations.
 */
import { printTable } from '../../bench/table.js';
import { killAllChildren } from './child-util.js';
import { figureRows, runTorture } from './torture-lib.js';

const kills = Number(process.argv[2] ?? process.env.TORTURE_KILLS ?? 500);
if (!Number.isInteger(kills) || kills < 1) {
  console.error(`usage: npm run torture [kills]   (got ${JSON.stringify(process.argv[2] ?? process.env.TORTURE_KILLS)})`);
  process.exit(2);
}
const started = Date.now();
const stop = () => void killAllChildren().then(() => process.exit(130));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

const f = await runTorture({ kills, log: (l) => console.error(l), keepFailedTrials: process.env.TORTURE_KEEP === '1' });
console.log(`\nactorloop SIGKILL torture: ${f.kills} kills in ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
printTable(['figure', 'value'], figureRows(f), ['left', 'right']);
if (f.violations.length > 0) {
  console.log(`\n${f.violations.length} violation(s):`);
  for (const v of f.violations) console.log(`- ${v}`);
  process.exit(1);
}
console.log('\n0 violations');
