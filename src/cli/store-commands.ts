import { join } from 'node:path';
import { repairStore, verifyStore, type StoreProblem, type VerifyReport } from '../persistence/verify.js';
import type { CommandIO } from './commands.js';
import { dataDirOf, statOf } from './data.js';
import { CliError, EXIT } from './errors.js';
import { command } from './invocation.js';

/** `actorloop verify` and `actorloop repair` (docs/cli.md): the store's own check and repair. */

const say = (io: CommandIO, text: string) => io.out.write(`${text}\n`);

function requireStoreDir(dir: string): void {
  const stats = statOf(dir, dir);
  if (!stats) throw new CliError(`no actorloop data at ${dir}`, EXIT.notFound);
  if (!stats.isDirectory() || (!statOf(join(dir, 'data.mdb'), dir) && !statOf(join(dir, 'journal'), dir))) {
    throw new CliError(`${dir} is not an actorloop data dir (no data.mdb, no journal/)`, EXIT.notFound);
  }
}

const line = (p: StoreProblem) =>
  `${p.where}${p.sessionId === undefined ? '' : `, session ${p.sessionId}`}${p.seq === undefined ? '' : `, seq ${p.seq}`}: ${p.reason}`;

function printReport(io: CommandIO, dir: string, report: VerifyReport): void {
  const checked = report.checked
    ? ` (${report.checked.sessions} sessions, ${report.checked.events} events, ${report.checked.frames} journal frames)`
    : '';
  if (report.ok) say(io, `ok: ${dir}${checked}`);
  else {
    say(io, `damaged: ${dir}: ${report.problems.length} problem(s)${checked}`);
    for (const p of report.problems) say(io, `  ${line(p)}`);
  }
}

/**
 * What to do after a report that is not ok. A problem at `verify` is the check failing to run
 * (e.g. no room in TMPDIR), not damage, and repair refuses a report with only those.
 */
export function verifyAdvice(report: VerifyReport, dir: string): string | undefined {
  if (report.ok) return undefined;
  if (report.problems.some((p) => p.where === 'version'))
    return (
      'records were written by a newer actorloop, which this version cannot read (not known to be damaged): ' +
      'upgrade actorloop and verify again; do not repair with this version'
    );
  if (report.problems.every((p) => p.where === 'verify'))
    return 'the check could not finish, so nothing is known to be damaged: fix what it names (e.g. room in TMPDIR) and verify again';
  return `run \`${command(`repair ${dir}`)}\` (with every process using it stopped) to rebuild what is damaged from what is whole`;
}

/** `actorloop verify [dir]`: every record and the journal, walked in a child process. */
export async function verifyCommand(dirArg: string | undefined, opts: { json?: boolean }, io: CommandIO): Promise<number> {
  const dir = dataDirOf(dirArg);
  requireStoreDir(dir);
  const report = await verifyStore(dir);
  if (opts.json) say(io, JSON.stringify(report));
  else {
    printReport(io, dir, report);
    const advice = verifyAdvice(report, dir);
    if (advice) say(io, advice);
  }
  return report.ok ? EXIT.ok : EXIT.corrupt;
}

/** `actorloop repair [dir]`: rebuilds a damaged data.mdb from the journal, or a damaged journal from data.mdb. */
export async function repairCommand(dirArg: string | undefined, io: CommandIO): Promise<number> {
  const dir = dataDirOf(dirArg);
  requireStoreDir(dir);
  const { repaired, actions, before, after } = await repairStore(dir);
  if (!repaired) {
    printReport(io, dir, before);
    say(io, 'nothing to repair');
    return EXIT.ok;
  }
  printReport(io, dir, before);
  for (const a of actions) say(io, `repair: ${a}`);
  printReport(io, dir, after);
  return after.ok ? EXIT.ok : EXIT.corrupt;
}
