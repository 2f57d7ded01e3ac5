import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { CorruptLogError, StoreError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';

/**
 * One thing `verifyStore` found wrong: where (`data.mdb`, `journal`, `journal/<segment>`, or
 * `surface` for an LMDB surface chunk, a cache of the records), and what.
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

const ChildLine = z.union([
  z.object({ at: z.object({ where: z.string(), sessionId: z.string().optional(), seq: z.number().optional() }) }),
  z.object({ result: z.object({ problems: z.array(StoreProblem), checked: Checked }) }),
]);

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
 * child process**, and resolves with a typed report; it never rejects for damage, and never
 * changes the store. A damaged B-tree page can make LMDB assert or fault, which no process
 * survives: the child's death by a signal is itself reported, naming the session and seq it was
 * reading. Stop the store's writers first for an exact answer (the walk reads one snapshot of
 * data.mdb, then the journal).
 * @example
 * const report = await verifyStore('./.actorloop')
 * if (!report.ok) for (const p of report.problems) console.error(p.where, p.sessionId, p.seq, p.reason)
 */
export async function verifyStore(path: string, options: VerifyOptions = {}): Promise<VerifyReport> {
  const { timeoutMs } = parseInput(VerifyOptions, options, 'verifyStore');
  parseInput(z.string().min(1), path, 'verifyStore: path');
  if (!existsSync(path) || !statSync(path).isDirectory()) throw new StoreError(path, 'no store here (not a directory)');
  const { args, cwd } = childCommand();
  const child = spawn(process.execPath, [...args, resolve(path)], { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_OPTIONS: '' } });
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
  let at: { where: string; sessionId?: string; seq?: number } = { where: 'data.mdb' };
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
    else if (exit.code === 0) {
      const { problems, checked } = parsed.data.result;
      return problems.length === 0 ? { ok: true, checked } : { ok: false, problems, checked };
    }
  }
  const place = `${at.sessionId === undefined ? '' : ` session ${at.sessionId}${at.seq === undefined ? '' : ` near seq ${at.seq}`} of`} ${at.where}`;
  const reason = timedOut
    ? `the verifying process did not finish within ${timeoutMs} ms (killed) while reading${place}`
    : exit.signal
      ? `the verifying process was killed by ${exit.signal} while reading${place}: LMDB's pages are damaged there (a native assert or fault, which no process survives)${err ? `; it said: ${lastLine(err)}` : ''}`
      : `the verifying process exited with code ${exit.code} while reading${place}${err ? `: ${lastLine(err)}` : ''}`;
  return { ok: false, problems: [{ where: at.where, ...(at.sessionId === undefined ? {} : { sessionId: at.sessionId }), ...(at.seq === undefined ? {} : { seq: at.seq }), reason }] };
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
 * @example
 * const { repaired, after } = await repairStore('./.actorloop')
 */
export async function repairStore(path: string, options: VerifyOptions = {}): Promise<RepairReport> {
  const before = await verifyStore(path, options);
  if (before.ok) return { repaired: false, actions: [], before, after: before };
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
      throw new CorruptLogError('(store)', 0, `data.mdb is damaged (${say}) and the store has no journal ` +
        `(it was written with durability 'committed', or its journal directory was removed): ` +
          `there is nothing to rebuild it from (nothing was changed)`);
    }
    actions.push(...rebuildData(path));
  }
  else if (dataDamaged.length === 0) {
    actions.push(...(await rejournal(path)));
    if (chunksDamaged) actions.push(...(await dropSurfaceChunks(path)));
  }
  else {
    const say = (ps: StoreProblem[]) => ps.map((p) => p.reason).join('; ');
    throw new CorruptLogError('(store)', 0, `both data.mdb (${say(dataDamaged)}) and the journal (${say(journalDamaged)}) are damaged: ` +
      `neither can be rebuilt from the other (nothing was changed)`);
  }
  return { repaired: true, actions, before, after: await verifyStore(path, options) };
}
