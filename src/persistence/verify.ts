import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { CorruptLogError, StoreError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';

/**
 * One thing `verifyStore` found wrong: where (`data.mdb`, `journal`, `journal/<segment>`,
 * `surface` for an LMDB surface chunk, a cache of the records, `verify` when a check could not
 * run, e.g. the temp dir for its copy of data.mdb is full, or `version` for a record a newer
 * actorloop wrote, which this one cannot read: not damage), and what.
 */
export const StoreProblem = z.object({
  where: z.string(),
  sessionId: z.string().optional(),
  seq: z.number().int().nonnegative().optional(),
  reason: z.string(),
});
export type StoreProblem = z.infer<typeof StoreProblem>;

const Checked = z.object({ sessions: z.number(), events: z.number(), frames: z.number() });

/** What `verifyStore` found: `{ ok: true }`, or every problem (and what it got through). */
export const VerifyReport = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), checked: Checked }),
  z.object({ ok: z.literal(false), problems: z.array(StoreProblem).min(1), checked: Checked.optional() }),
]);
export type VerifyReport = z.infer<typeof VerifyReport>;

const Place = z.object({ where: z.string(), sessionId: z.string().optional(), seq: z.number().optional(), step: z.string().optional() });
type Place = z.infer<typeof Place>;
const Found = z.object({ problems: z.array(StoreProblem), checked: Checked });
const ChildLine = z.union([z.object({ at: Place }), z.object({ walked: Found }), z.object({ result: Found })]);

export const VerifyOptions = z.strictObject({
  /** How long the walk may take before it is killed and reported as a problem (default 10 minutes). */
  timeoutMs: z.number().int().positive().default(600_000),
});
export type VerifyOptions = z.input<typeof VerifyOptions>;

/** The child's program and how to run it: the compiled `.js`, or the `.ts` source under tsx. */
function childCommand(): { args: string[]; cwd: string } {
  const here = fileURLToPath(import.meta.url);
  const ts = here.endsWith('.ts');
  const script = join(dirname(here), `verify-child.${ts ? 'ts' : 'js'}`);
  // from the sources, tsx resolves from the package's own directory
  return { args: [...(ts ? ['--import', 'tsx'] : []), script], cwd: resolve(dirname(here), '..', '..') };
}

/**
 * Walks every record, head, id-index entry and journal frame of the LMDB store at `path` **in a
 * child process**, then takes every path a reader and a writer of data.mdb take (every
 * database's entries, every page, the free-page list, writes that touch every page) in a
 * throwaway copy of it in the temp dir, and resolves with a typed report; it never rejects for
 * damage, and never changes the store. A damaged B-tree page can make LMDB assert or fault, which
 * no process survives: the child's death by a signal is itself reported, naming the session and
 * seq it was reading or the step of the copy. Stop the store's writers first for an exact answer
 * (the walk reads one snapshot of data.mdb, then the journal). The temp dir (`TMPDIR`) needs
 * room for two copies of data.mdb; a failure there is a problem at `where: 'verify'` (the check
 * could not run), not damage, and a temp dir that cannot be made at all a StoreError.
 * @example
 * const report = await verifyStore('./.actorloop')
 * if (!report.ok) for (const p of report.problems) console.error(p.where, p.sessionId, p.seq, p.reason)
 */
export async function verifyStore(path: string, options: VerifyOptions = {}): Promise<VerifyReport> {
  const { timeoutMs } = parseInput(VerifyOptions, options, 'verifyStore');
  parseInput(z.string().min(1), path, 'verifyStore: path');
  if (!existsSync(path) || !statSync(path).isDirectory()) throw new StoreError(path, 'no store here (not a directory)');
  const scratch = makeScratch();
  try {
    return await runChild(path, scratch, timeoutMs);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The temp dir for the child's throwaway copy of data.mdb (verify-exercise.ts), removed by the parent: the child may die. */
function makeScratch(): string {
  try {
    return mkdtempSync(join(tmpdir(), 'actorloop-verify-copy-'));
  } catch (e) {
    throw new StoreError(tmpdir(), `verifyStore needs a temp dir for a copy of data.mdb (set TMPDIR): ${(e as Error).message}`, {
      cause: e,
    });
  }
}

async function runChild(path: string, scratch: string, timeoutMs: number): Promise<VerifyReport> {
  const { args, cwd } = childCommand();
  const child = spawn(process.execPath, [...args, resolve(path), scratch], {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (err = (err + c).slice(-4000)));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, timeoutMs);
  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res, rej) => {
    child.on('error', rej);
    child.on('close', (code, signal) => res({ code, signal }));
  }).finally(() => clearTimeout(timer));
  let at: Place = { where: 'data.mdb' };
  let walked: z.infer<typeof Found> | undefined;
  for (const text of out.split('\n')) {
    if (!text) continue;
    let parsed: ReturnType<typeof ChildLine.safeParse>;
    try {
      parsed = ChildLine.safeParse(JSON.parse(text));
    } catch {
      continue;
    }
    if (!parsed.success) continue;
    if ('at' in parsed.data) at = parsed.data.at;
    else if ('walked' in parsed.data) walked = parsed.data.walked;
    else if (exit.code === 0) {
      const { problems, checked } = parsed.data.result;
      return problems.length === 0 ? { ok: true, checked } : { ok: false, problems, checked };
    }
  }
  // what the walk found before the child died stays in the report (repair decides by all of it)
  return {
    ok: false,
    problems: [...(walked?.problems ?? []), death(at, exit, timedOut, timeoutMs, err)],
    ...(walked ? { checked: walked.checked } : {}),
  };
}

/** The problem a verifying child's death (or its timeout) is, at the last place it named. */
function death(
  at: Place,
  exit: { code: number | null; signal: NodeJS.Signals | null },
  timedOut: boolean,
  timeoutMs: number,
  err: string,
): StoreProblem {
  const near = at.seq === undefined ? '' : ` near seq ${at.seq}`;
  const doing =
    at.step !== undefined
      ? `${at.step} (in a throwaway copy of ${at.where})`
      : `reading${at.sessionId === undefined ? '' : ` session ${at.sessionId}${near} of`} ${at.where}`;
  const reason = timedOut
    ? `the verifying process did not finish within ${timeoutMs} ms (killed) while ${doing}`
    : exit.signal
      ? `the verifying process was killed by ${exit.signal} while ${doing}: LMDB's pages are damaged there ` +
        `(a native assert or fault, which no process survives)${err ? `; it said: ${lastLine(err)}` : ''}`
      : `the verifying process exited with code ${exit.code} while ${doing}${err ? `: ${lastLine(err)}` : ''}`;
  return {
    where: at.where,
    ...(at.sessionId === undefined ? {} : { sessionId: at.sessionId }),
    ...(at.seq === undefined ? {} : { seq: at.seq }),
    reason,
  };
}

const lastLine = (s: string) => s.trim().split('\n').filter(Boolean).slice(-3).join(' | ');

/** What `repairStore` did. */
export interface RepairReport {
  /** Whether anything was changed. */
  repaired: boolean;
  /** What was done, in order, in words. */
  actions: string[];
  /** The report of the verification run after the repair (`before` is the one that decided it). */
  before: VerifyReport;
  after: VerifyReport;
}

/**
 * Repairs the LMDB store at `path` after `verifyStore` found damage. Stop every process that has
 * it open first. A damaged (or missing) `data.mdb` with a whole journal is moved aside
 * (`data.mdb.damaged-<time>`) and rebuilt from the journal: every acknowledged event reads back.
 * A damaged journal beside a whole `data.mdb` is moved aside (`journal.damaged-<time>`) and
 * written again from `data.mdb`. With both damaged nothing is changed: CorruptLogError. A surface
 * chunk that differs from its records (and nothing else) is dropped, with every other chunk.
 * When verify could not run its checks (every problem at `verify`, e.g. a full temp dir),
 * nothing is changed: StoreError.
 * @example
 * const { repaired, after } = await repairStore('./.actorloop')
 */
export async function repairStore(path: string, options: VerifyOptions = {}): Promise<RepairReport> {
  const before = await verifyStore(path, options);
  if (before.ok) return { repaired: false, actions: [], before, after: before };
  const newer = before.problems.filter((p) => p.where === 'version');
  if (newer.length > 0) {
    throw new StoreError(
      path,
      `${newer.length} record(s) were written by a newer actorloop, which this version cannot read ` +
        `(${newer[0]!.reason}): upgrade actorloop and verify again; repair would not know them (nothing was changed)`,
    );
  }
  if (before.problems.every((p) => p.where === 'verify')) {
    throw new StoreError(
      path,
      'verify could not finish, so there is nothing known to repair (nothing was changed): ' +
        before.problems.map((p) => p.reason).join('; '),
    );
  }
  const journalDamaged = before.problems.filter((p) => p.where.startsWith('journal'));
  const dataDamaged = before.problems.filter((p) => p.where === 'data.mdb');
  const chunksDamaged = before.problems.some((p) => p.where === 'surface');
  const { dropSurfaceChunks, rebuildData, rejournal } = await import('./repair.js');
  const actions: string[] = [];
  // surface chunks are a cache of the records: a bad one is dropped with the others (the next opens write them again)
  if (dataDamaged.length === 0 && journalDamaged.length === 0) actions.push(...(await dropSurfaceChunks(path)));
  else if (journalDamaged.length === 0) {
    if (!existsSync(join(path, 'journal'))) {
      const say = dataDamaged.map((p) => p.reason).join('; ');
      throw new CorruptLogError(
        '(store)',
        0,
        `data.mdb is damaged (${say}) and the store has no journal ` +
          `(it was written with durability 'committed', or its journal directory was removed): ` +
          `there is nothing to rebuild it from (nothing was changed)`,
      );
    }
    actions.push(...rebuildData(path));
  } else if (dataDamaged.length === 0) {
    actions.push(...(await rejournal(path)));
    if (chunksDamaged) actions.push(...(await dropSurfaceChunks(path)));
  } else {
    const say = (ps: StoreProblem[]) => ps.map((p) => p.reason).join('; ');
    throw new CorruptLogError(
      '(store)',
      0,
      `both data.mdb (${say(dataDamaged)}) and the journal (${say(journalDamaged)}) are damaged: ` +
        `neither can be rebuilt from the other (nothing was changed)`,
    );
  }
  return { repaired: true, actions, before, after: await verifyStore(path, options) };
}
