/**
 * The SIGKILL torture harness (DESIGN §5, issue 5 item 3), shared by test/crash/agent-torture.test.ts
 * (`npm test`, ≥ 30 kills) and test/crash/torture.ts (`npm run torture`, N kills), and the
 * definitions its child program (test/crash/agent-child.ts) uses: sessions, run scripts, ledgers.
 *
 * One trial = a fresh directory (LMDB log + ledgers) and a workload of `sessions × runs` scripted
 * agent runs. The parent starts a child, which carries the workload on from wherever the log
 * stands, and kills it: with a deliberate kill point (the child SIGKILLs itself inside a tool after
 * its effect, right after a tool/call intent, inside delivery, or at any of these: `random`) or with
 * a SIGKILL after a random delay (`timer`). It restarts children until one prints DONE (after
 * `maxLivesPerTrial` killed lives a last child runs without kills, so a trial always ends), then
 * reopens the log and checks it against the ledgers and everything the children acknowledged.
 * Trials repeat until `kills` kills happened.
 *
 * This module must not import vitest: the child and `npm run torture` import it too.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { billedOf, checkSpending } from './torture-budget.js';
import { join } from 'node:path';
import type { EventRecord } from '../../src/contracts/events.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { tempDir } from '../helpers/tmp.js';
import { REPO_ROOT, spawnTs, type ChildRun } from './child-util.js';

export const AGENT_CHILD = join(REPO_ROOT, 'test/crash/agent-child.ts');

// ---------------------------------------------------------------------------------------------
// Shared with the child

export const KILL_POINTS = ['tool-inside', 'after-intent', 'inside-delivery'] as const;
export type KillPoint = (typeof KILL_POINTS)[number];
/** How a child life is ended: a deliberate point, any point (`random`), or a parent SIGKILL after a delay. */
export const KILL_MODES = [...KILL_POINTS, 'random', 'timer'] as const;
export type KillMode = (typeof KILL_MODES)[number];

/** What a torture child does (sent as `GO <json>`). */
export interface TorturePlan {
  dir: string;
  sessions: number;
  runs: number;
  killAt?: KillPoint | 'random';
  killP?: number;
  /** Negative control: `charge.reconcile` silently executes the charge again (a broken tool). */
  broken?: 'reexecute';
}

/** What a fencing child does (sent as `GO <json>`): see agent-child.ts. */
export interface FenceJob {
  path: string;
  b?: string;
  a?: { session: string; variant: 'same-batch' | 'next-step'; hold: 'hold' | 'hold_nr' };
}

export const trialPaths = (dir: string) => ({
  db: join(dir, 'db'),
  ledger: join(dir, 'ledger.tsv'),
  finals: join(dir, 'finals.tsv'),
  usage: join(dir, 'usage.tsv'),
});

export const sessionIdsOf = (n: number): string[] => Array.from({ length: n }, (_, i) => `s${i}`);
export const runIdsOf = (n: number): string[] => Array.from({ length: n }, (_, i) => `run-${i + 1}`);
/** The delivery owner is idempotent in s0, s3, s6 …, not in the others. */
export const isIdempotentSession = (sessionId: string): boolean => Number(sessionId.slice(1)) % 3 === 0;
/** Exclusive tools of the torture workload, and whether they can reconcile. */
export const EXCLUSIVE_TOOLS: Record<string, { reconcile: boolean }> = { charge: { reconcile: true }, notify: { reconcile: false } };
/** run/end statuses that leave the run open (resumable). */
export const SETTLED_NOT: readonly string[] = ['suspended', 'detached', 'fenced'];

export type ScriptStep = { calls: { name: string; args: Record<string, unknown> }[] } | { final: string };

export const PROMPT_RE = /^(s\d+) (run-\d+): follow the script$/;
export const promptOf = (sessionId: string, runId: string) => `${sessionId} ${runId}: follow the script`;

/**
 * The model's script for one run (deterministic, so any process answers the same): a batch with
 * an exclusive reconcilable call and two parallel reads, a batch of two exclusive calls, for some
 * runs a third batch, then the final answer.
 */
export function runScript(sessionId: string, runId: string): ScriptStep[] {
  const k = Number(runId.slice(4));
  const s = Number(sessionId.slice(1));
  const steps: ScriptStep[] = [
    {
      calls: [
        { name: 'charge', args: { amount: k } },
        { name: 'lookup', args: { q: `a${k}` } },
        { name: 'lookup', args: { q: `b${k}` } },
      ],
    },
    {
      calls: [
        { name: 'notify', args: { text: `n${k}` } },
        { name: 'charge', args: { amount: k + 100 } },
      ],
    },
  ];
  if ((k + s) % 2 === 0)
    steps.push({
      calls: [
        { name: 'lookup', args: { q: `c${k}` } },
        { name: 'notify', args: { text: `bye ${k}` } },
      ],
    });
  steps.push({ final: `final answer of ${sessionId} ${runId}` });
  return steps;
}

export const FENCE_PROMPT_RE = /^FENCE (\S+) (same-batch|next-step) (hold|hold_nr)$/;
/** The fencing run: `hold` then `after`, in one batch or in two steps, then the final answer. */
export function fenceScript(variant: 'same-batch' | 'next-step', hold: string): ScriptStep[] {
  return variant === 'same-batch'
    ? [
        {
          calls: [
            { name: hold, args: {} },
            { name: 'after', args: {} },
          ],
        },
        { final: 'fence run done' },
      ]
    : [{ calls: [{ name: hold, args: {} }] }, { calls: [{ name: 'after', args: {} }] }, { final: 'fence run done' }];
}

export const ledgerLine = (key: string, callId: string, pid: number) => `${key}\t${callId}\t${pid}`;
/** A finals-ledger line. The session is in it: a finalMessageId is unique within its session only. */
export const finalsLine = (finalMessageId: string, runId: string, sessionId: string, pid: number) =>
  `${finalMessageId}\t${runId}\t${sessionId}\t${pid}`;

export interface LedgerEntry {
  key: string;
  callId: string;
  pid: number;
}

/** Parses a tool ledger; malformed lines are returned apart (they are a violation). */
export function parseLedger(text: string): { entries: LedgerEntry[]; malformed: string[] } {
  const entries: LedgerEntry[] = [];
  const malformed: string[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const [key, callId, pid, ...more] = line.split('\t');
    if (!key || !callId || !pid || more.length > 0 || !/^\d+$/.test(pid)) malformed.push(line);
    else entries.push({ key, callId, pid: Number(pid) });
  }
  return { entries, malformed };
}

export const readText = (path: string): string => (existsSync(path) ? readFileSync(path, 'utf8') : '');

/** Process state from /proc (`T` = stopped); 'T' where there is no /proc (SIGSTOP is then trusted). */
export function procState(pid: number): string {
  if (!existsSync('/proc/self/stat')) return 'T';
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

// ---------------------------------------------------------------------------------------------
// The parent

export interface TortureOptions {
  /** Stop killing once this many kills happened (the trial in progress is then finished cleanly). */
  kills: number;
  sessions?: number;
  runs?: number;
  /** Probability that a reached kill point kills (deliberate modes). */
  killP?: number;
  /** Killed lives per trial before a last life runs without kills. */
  maxLivesPerTrial?: number;
  /** Upper bound of the random delay of `timer` kills, in ms after GO. */
  maxDelayMs?: number;
  /** Children spawned ahead (they load while another one runs). */
  prefetch?: number;
  /** Progress lines (e.g. console.error). */
  log?: (line: string) => void;
  /** Keep the directory (log + ledgers) of a trial with violations, for inspection (default: removed). */
  keepFailedTrials?: boolean;
  /** Kill modes to draw from (default: all of KILL_MODES, shuffled in rounds so that each comes up). */
  modes?: readonly KillMode[];
  /** Negative control only: see TorturePlan.broken. */
  broken?: 'reexecute';
}

export interface TortureFigures {
  trials: number;
  lives: number;
  kills: number;
  killsByPoint: Record<KillPoint | 'timer', number>;
  killsByMode: Record<KillMode, number>;
  runs: number;
  runsSettled: number;
  runStatuses: Record<string, number>;
  attempts: number;
  continues: number;
  events: number;
  acked: number;
  exclusiveCalls: number;
  ledgerEntries: number;
  executedCalls: number;
  uncertainCalls: number;
  uncertainWithEffect: number;
  reconciledCalls: number;
  parallelCalls: number;
  parallelReruns: number;
  finals: number;
  deliveredFinals: number;
  redeliveries: number;
  duplicateDeliveries: number;
  deliveryUnknown: number;
  deliveryUnknownButDelivered: number;
  violations: string[];
}

const zeroFigures = (): TortureFigures => ({
  trials: 0,
  lives: 0,
  kills: 0,
  killsByPoint: { 'tool-inside': 0, 'after-intent': 0, 'inside-delivery': 0, timer: 0 },
  killsByMode: { 'tool-inside': 0, 'after-intent': 0, 'inside-delivery': 0, random: 0, timer: 0 },
  runs: 0,
  runsSettled: 0,
  runStatuses: {},
  attempts: 0,
  continues: 0,
  events: 0,
  acked: 0,
  exclusiveCalls: 0,
  ledgerEntries: 0,
  executedCalls: 0,
  uncertainCalls: 0,
  uncertainWithEffect: 0,
  reconciledCalls: 0,
  parallelCalls: 0,
  parallelReruns: 0,
  finals: 0,
  deliveredFinals: 0,
  redeliveries: 0,
  duplicateDeliveries: 0,
  deliveryUnknown: 0,
  deliveryUnknownButDelivered: 0,
  violations: [],
});

/** One child life as the parent saw it. */
export interface Life {
  lines: string[];
  mode: KillMode | 'none';
  /** How it ended: a kill point, a timer kill, or done. */
  end: KillPoint | 'timer' | 'done';
}

const shuffle = <T>(xs: T[]): T[] => {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
};

/**
 * Runs trials until `kills` kills happened; returns the figures (violations listed, never thrown:
 * a child that misbehaves, e.g. prints ERROR or exits on its own, is a violation too).
 */
export async function runTorture(opts: TortureOptions): Promise<TortureFigures> {
  const sessions = opts.sessions ?? 3;
  const runs = opts.runs ?? 4;
  const killP = opts.killP ?? 0.35;
  const maxLives = opts.maxLivesPerTrial ?? 40;
  const maxDelayMs = opts.maxDelayMs ?? 400;
  const prefetch = opts.prefetch ?? 2;
  const log = opts.log ?? (() => {});
  const f = zeroFigures();
  const pool: ChildRun[] = [];
  const take = (): ChildRun => {
    while (pool.length < prefetch + 1)
      pool.push(spawnTs(AGENT_CHILD, ['torture', '--wait-go'], { label: `agent-child #${f.lives + pool.length + 1}` }));
    return pool.shift()!;
  };
  let modes: KillMode[] = [];
  const nextMode = (): KillMode => {
    if (modes.length === 0) modes = shuffle([...(opts.modes ?? KILL_MODES)]);
    return modes.pop()!;
  };
  const started = Date.now();
  try {
    while (f.kills < opts.kills) {
      f.trials++;
      const violationsBefore = f.violations.length;
      const dir = tempDir('actorloop-torture-');
      const lives: Life[] = [];
      let ok = true;
      for (let n = 1; ; n++) {
        const killing = f.kills < opts.kills && n <= maxLives;
        const mode: KillMode | 'none' = killing ? nextMode() : 'none';
        const child = take();
        f.lives++;
        await child.waitFor((l) => l === 'READY', 60_000, 'READY');
        const plan: TorturePlan = {
          dir: dir.path,
          sessions,
          runs,
          ...(mode !== 'none' && mode !== 'timer' ? { killAt: mode, killP } : {}),
          ...(opts.broken ? { broken: opts.broken } : {}),
        };
        child.send(`GO ${JSON.stringify(plan)}`);
        // timer kills, and a backup timer for a quarter of the deliberate lives
        let timer: NodeJS.Timeout | undefined;
        let timerFired = false;
        if (mode === 'timer' || (mode !== 'none' && !opts.modes && Math.random() < 0.25)) {
          timer = setTimeout(() => {
            timerFired = true;
            child.signal('SIGKILL');
          }, Math.random() * maxDelayMs);
        }
        const exit = await child.waitExit(120_000).catch((e: Error) => {
          f.violations.push(`trial ${f.trials} life ${n}: ${e.message}`);
          return undefined;
        });
        clearTimeout(timer);
        const lines = child.lines;
        for (const l of lines.filter((x) => x.startsWith('ERROR')))
          f.violations.push(`trial ${f.trials} life ${n} (${mode}): child error: ${l}`);
        const killLine = lines.find((l) => l.startsWith('KILL '));
        let end: Life['end'];
        if (lines.includes('DONE')) end = 'done';
        else if (exit?.signal === 'SIGKILL' && killLine) end = killLine.slice(5) as KillPoint;
        else if (exit?.signal === 'SIGKILL' && timerFired) end = 'timer';
        else {
          f.violations.push(`trial ${f.trials} life ${n} (${mode}): the child ended without DONE and without a kill: ${child.describe()}`);
          ok = false;
          break;
        }
        lives.push({ lines: [...lines], mode, end });
        if (end === 'done') break;
        f.kills++;
        f.killsByPoint[end]++;
        if (mode !== 'none') f.killsByMode[mode]++;
        if (n > maxLives + 1) {
          f.violations.push(`trial ${f.trials}: the workload did not finish in a life without kills`);
          ok = false;
          break;
        }
      }
      if (ok) await checkTrial(dir.path, { sessions, runs }, lives, f, `trial ${f.trials}`);
      if (f.violations.length === violationsBefore || !opts.keepFailedTrials) rmSync(dir.path, { recursive: true, force: true });
      else log(`trial ${f.trials}: kept ${dir.path} for inspection`);
      log(
        `trial ${f.trials}: ${lives.length} lives, ${f.kills}/${opts.kills} kills, ${f.violations.length} violations, ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );
      // A child that broke the protocol (no DONE, no kill) makes further trials meaningless.
      if (!ok) break;
    }
  } finally {
    for (const c of pool) c.signal('SIGKILL');
    await Promise.all(pool.map((c) => c.exited));
  }
  return f;
}

const fmtEvent = (e: EventRecord) => `${e.sessionId}#${e.seq} ${e.type}`;

/**
 * Checks one finished trial from its log (reopened here), its ledgers and its children's output,
 * adding to the figures and violations.
 */
export async function checkTrial(
  dir: string,
  plan: { sessions: number; runs: number },
  lives: readonly Life[],
  f: TortureFigures,
  label: string,
): Promise<void> {
  const v = (msg: string) => {
    if (f.violations.length < 200) f.violations.push(`${label}: ${msg}`);
  };
  const paths = trialPaths(dir);
  const sessionIds = sessionIdsOf(plan.sessions);
  const runIds = runIdsOf(plan.runs);
  const logs = new Map<string, EventRecord[]>();
  const store = lmdbStore({ path: paths.db });
  try {
    for (const s of sessionIds) {
      const events: EventRecord[] = [];
      for await (const e of store.readEvents(s)) events.push(e);
      logs.set(s, events);
    }
  } catch (e) {
    v(`reading the log failed: ${(e as Error).message}`);
    return;
  } finally {
    await store.close();
  }

  // Lines of every life, in order; ACK positions for the write-ahead checks.
  const acked = new Map<string, { life: number; at: number; eventId: string }>(); // `${s}#${seq}`
  lives.forEach((life, li) => {
    life.lines.forEach((l, at) => {
      const m = /^ACK (\S+) (\d+) (\S+)$/.exec(l);
      if (!m) return;
      const k = `${m[1]}#${m[2]}`;
      const seen = acked.get(k);
      if (seen && seen.eventId !== m[3]) v(`${k} acknowledged twice with different events (${seen.eventId}, ${m[3]})`);
      if (!seen) acked.set(k, { life: li, at, eventId: m[3]! });
      f.acked++;
    });
    for (const l of life.lines) {
      if (!l.startsWith('RUN ')) continue;
      f.attempts++;
      if (l.endsWith(' continue')) f.continues++;
    }
  });
  // Each life's writer epoch per session: from its RECOVERY lines, or — a life killed inside
  // openSession (e.g. during a redelivery) prints none — from the events it acknowledged.
  const epochs = lives.map((life) => {
    const m = new Map<string, number>();
    for (const l of life.lines) {
      if (l.startsWith('RECOVERY ')) {
        const r = JSON.parse(l.slice(9)) as { sessionId: string; writerEpoch: number };
        m.set(r.sessionId, r.writerEpoch);
      }
      const a = /^ACK (\S+) (\d+) /.exec(l);
      const e = a ? logs.get(a[1]!)?.[Number(a[2]) - 1] : undefined;
      if (e && !m.has(e.sessionId)) m.set(e.sessionId, e.writerEpoch);
    }
    return m;
  });
  /**
   * Write-ahead: an effect started at line `at` of life `li` for the intent `e` (tool/call or
   * final/message). An intent written by this process must have been acknowledged (durable)
   * before the effect started; an intent of an earlier writer was read back from the log (it may
   * have been durable without an ACK: killed between the commit and its ACK line), which only a
   * recovery may act on (`fromEarlier`: a parallel re-run, a redelivery). Returns the problem.
   */
  const writeAheadProblem = (e: EventRecord, li: number, at: number, fromEarlierAllowed: boolean): string | undefined => {
    const epoch = epochs[li]!.get(e.sessionId);
    if (epoch === undefined) return `the process had not attached ${e.sessionId}`;
    if (e.writerEpoch === epoch) {
      const a = acked.get(`${e.sessionId}#${e.seq}`);
      return a && a.life === li && a.at < at ? undefined : `its ${e.type} (seq ${e.seq}) was not acknowledged before`;
    }
    if (e.writerEpoch > epoch) return `its ${e.type} (seq ${e.seq}) was written by a later writer (epoch ${e.writerEpoch} > ${epoch})`;
    return fromEarlierAllowed
      ? undefined
      : `its ${e.type} (seq ${e.seq}) was written by an earlier process (epoch ${e.writerEpoch}): executed again after recovery`;
  };

  // 1. seq contiguous, acknowledged events present with the same eventId.
  for (const s of sessionIds) {
    const events = logs.get(s)!;
    f.events += events.length;
    events.forEach((e, i) => {
      if (e.seq !== i + 1) v(`${s}: position ${i} holds seq ${e.seq} (seq not contiguous)`);
    });
  }
  for (const [k, a] of acked) {
    const [s, seqText] = k.split('#') as [string, string];
    const e = logs.get(s)?.[Number(seqText) - 1];
    if (!e || e.seq !== Number(seqText))
      v(`acknowledged event ${k} (${a.eventId}) lost: the log of ${s} ends at ${logs.get(s)?.length ?? 0}`);
    else if (e.eventId !== a.eventId) v(`acknowledged event ${k} was ${a.eventId}, the log holds ${e.eventId} (${e.type})`);
  }

  const billed = billedOf(readText(paths.usage), v);
  // Per-session indexes of the log.
  interface Call {
    sessionId: string;
    runId: string;
    event: EventRecord;
    results: EventRecord[];
  }
  const calls = new Map<string, Call>(); // by idempotencyKey
  const keyOfCall = new Map<string, string>(); // session/run/callId → idempotencyKey
  const finals = new Map<string, { sessionId: string; event: EventRecord; deliveries: EventRecord[] }>();
  for (const s of sessionIds) {
    const events = logs.get(s)!;
    const runOfTurn = new Map<number, string>();
    const ends = new Map<string, EventRecord[]>();
    for (const e of events) {
      const p = e.payload as Record<string, unknown>;
      if (e.type === 'run/start') {
        const runId = String(p.runId);
        if (!runIds.includes(runId)) v(`${fmtEvent(e)}: unknown run ${runId}`);
        const known = runOfTurn.get(e.turn);
        if (known !== undefined && known !== runId) v(`${fmtEvent(e)}: turn ${e.turn} belongs to ${known} and ${runId}`);
        runOfTurn.set(e.turn, runId);
        const settledBefore = (ends.get(runId) ?? []).some((x) => !SETTLED_NOT.includes(String(x.payload.status)));
        if (settledBefore) v(`${fmtEvent(e)}: ${runId} started again after it settled`);
      } else if (e.type === 'run/end') {
        const runId = String(p.runId);
        ends.set(runId, [...(ends.get(runId) ?? []), e]);
      } else if (e.type === 'tool/call') {
        const runId = runOfTurn.get(e.turn) ?? '?';
        const key = String(p.idempotencyKey);
        const expected = `${s}/${runId}/${e.step}/${String(p.callId)}`;
        if (key !== expected) v(`${fmtEvent(e)}: idempotencyKey ${key} is not ${expected}`);
        keyOfCall.set(`${s}/${runId}/${String(p.callId)}`, key); // (call ids are unique within a run here)
        if (calls.has(key)) v(`${fmtEvent(e)}: tool/call ${key} logged twice (first at seq ${calls.get(key)!.event.seq})`);
        else calls.set(key, { sessionId: s, runId, event: e, results: [] });
      } else if (e.type === 'tool/result') {
        const callOf = `${s}/${runOfTurn.get(e.turn) ?? '?'}/${String(p.callId)}`;
        const key = keyOfCall.get(callOf) ?? callOf;
        const c = calls.get(key);
        if (!c) v(`${fmtEvent(e)}: tool/result for ${key} without its tool/call`);
        else c.results.push(e);
      } else if (e.type === 'final/message') {
        // finalMessageId now carries the session id; keyed by session too, for older logs
        const id = `${s}:${String(p.finalMessageId)}`;
        if (finals.has(id)) v(`${fmtEvent(e)}: final ${id} logged twice`);
        else finals.set(id, { sessionId: s, event: e, deliveries: [] });
      } else if (e.type === 'delivery/committed' || e.type === 'delivery/unknown') {
        const id = `${s}:${String(p.finalMessageId)}`;
        const fm = finals.get(id);
        if (!fm) v(`${fmtEvent(e)}: delivery event for ${id} without its final/message`);
        else fm.deliveries.push(e);
      }
    }
    // 6. what each run spent: the provider's bill and the log's count within maxCost (torture-budget.ts)
    checkSpending(s, runIds, events, billed, v);
    // 5. every run settled, once
    for (const runId of runIds) {
      f.runs++;
      const settled = (ends.get(runId) ?? []).filter((x) => !SETTLED_NOT.includes(String(x.payload.status)));
      if (settled.length === 0)
        v(
          `${s}/${runId} never settled (run/end statuses: ${(ends.get(runId) ?? []).map((x) => String(x.payload.status)).join(', ') || 'none'})`,
        );
      else if (settled.length > 1) v(`${s}/${runId} settled ${settled.length} times`);
      else {
        f.runsSettled++;
        const st = String(settled[0]!.payload.status);
        f.runStatuses[st] = (f.runStatuses[st] ?? 0) + 1;
        // a run whose crashes' reservations spent its maxCost ends budget_exhausted, with no final
        const costSpent =
          st === 'budget_exhausted' && (settled[0]!.payload.result as { budget?: string } | undefined)?.budget === 'maxCost';
        if (st !== 'succeeded' && st !== 'delivery_unknown' && !costSpent)
          v(`${s}/${runId} settled ${st}: ${JSON.stringify(settled[0]!.payload.error ?? null)}`);
      }
      const runFinals = events.filter((e) => e.type === 'final/message' && e.payload.runId === runId);
      const exhausted = settled.length === 1 && String(settled[0]!.payload.status) === 'budget_exhausted';
      if (runFinals.length !== (exhausted ? 0 : 1))
        v(`${s}/${runId} has ${runFinals.length} final/message events (${exhausted ? 'none' : 'one'} expected)`);
    }
  }

  // 2./3. tool ledger against the log
  const ledger = parseLedger(readText(paths.ledger));
  for (const m of ledger.malformed) v(`malformed ledger line ${JSON.stringify(m)}`);
  f.ledgerEntries += ledger.entries.length;
  const byKey = new Map<string, LedgerEntry[]>();
  for (const e of ledger.entries) byKey.set(e.key, [...(byKey.get(e.key) ?? []), e]);
  for (const [key, entries] of byKey) {
    const c = calls.get(key);
    if (!c) v(`ledger entry ${key} (pid ${entries[0]!.pid}) has no tool/call intent in the log`);
    else if (c.event.payload.mode !== 'exclusive') v(`ledger entry ${key} for a ${String(c.event.payload.mode)} call`);
    if (entries.length > 1) v(`exclusive call ${key} executed ${entries.length} times (pids ${entries.map((e) => e.pid).join(', ')})`);
  }
  for (const [key, c] of calls) {
    const p = c.event.payload as Record<string, unknown>;
    if (c.results.length !== 1) {
      v(`${key} (${String(p.name)}, ${fmtEvent(c.event)}) has ${c.results.length} tool/results`);
      if (c.results.length === 0) continue;
    }
    const outcome = c.results[0]!.payload.outcome as { kind: string; content?: string };
    const entries = byKey.get(key) ?? [];
    if (p.mode === 'parallel') {
      f.parallelCalls++;
      if (outcome.kind !== 'completed' || !outcome.content?.startsWith('found '))
        v(`parallel call ${key}: unexpected outcome ${JSON.stringify(outcome)}`);
      continue;
    }
    f.exclusiveCalls++;
    const tool = EXCLUSIVE_TOOLS[String(p.name)];
    if (!tool) v(`${key}: unknown exclusive tool ${String(p.name)}`);
    const content = outcome.content ?? '';
    if (outcome.kind === 'completed' && content.startsWith('executed: ')) {
      f.executedCalls++;
      const pid = Number(/ by (\d+)$/.exec(content)?.[1]);
      if (entries.length === 0) v(`${key}: result says executed (${content}) but the ledger has no entry`);
      else if (entries[0]!.pid !== pid)
        v(`${key}: result says executed by ${pid}, the ledger says ${entries.map((e) => e.pid).join(', ')}`);
    } else if (outcome.kind === 'completed' && content.startsWith('reconciled: ')) {
      f.reconciledCalls++;
      if (!tool?.reconcile) v(`${key}: reconciled, but ${String(p.name)} has no reconcile`);
      if (entries.length === 0) v(`${key}: reconciled as done, but the ledger has no entry`);
    } else if (outcome.kind === 'uncertain-hanging' || outcome.kind === 'uncertain-settled') {
      f.uncertainCalls++;
      if (entries.length > 0) f.uncertainWithEffect++;
      if (entries.length > 0 && tool?.reconcile)
        v(`${key}: uncertain, but its reconcile should have found the ledger entry (pid ${entries[0]!.pid})`);
    } else {
      v(
        `${key}: unexpected outcome for an exclusive call ${JSON.stringify(outcome)}${entries.length ? ` (the ledger has ${entries.length} entries)` : ''}`,
      );
    }
  }

  // 4. finals ledger against the log
  const finalsLedger = readText(paths.finals)
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => l.split('\t'));
  const deliveredLines = new Map<string, number>();
  for (const parts of finalsLedger) {
    if (parts.length !== 4) v(`malformed finals ledger line ${JSON.stringify(parts.join('\t'))}`);
    const id = `${parts[2]}:${parts[0]}`;
    deliveredLines.set(id, (deliveredLines.get(id) ?? 0) + 1);
  }
  for (const [id] of deliveredLines) if (!finals.has(id)) v(`final ${id} delivered but not in the log`);
  for (const [id, fm] of finals) {
    f.finals++;
    const idem = isIdempotentSession(fm.sessionId);
    const lines = deliveredLines.get(id) ?? 0;
    const committed = fm.deliveries.filter((e) => e.type === 'delivery/committed');
    const unknown = fm.deliveries.filter((e) => e.type === 'delivery/unknown');
    if (fm.deliveries.length !== 1)
      v(
        `final ${id} (${fmtEvent(fm.event)}) has ${committed.length} delivery/committed and ${unknown.length} delivery/unknown (exactly one expected)`,
      );
    if (committed.length > 0) f.deliveredFinals++;
    if (committed.some((e) => e.payload.redelivered === true)) f.redeliveries++;
    if (unknown.length > 0) {
      f.deliveryUnknown++;
      if (lines > 0) f.deliveryUnknownButDelivered++;
      if (idem) v(`final ${id}: delivery/unknown, but the owner of ${fm.sessionId} is idempotent (it should have been redelivered)`);
    }
    if (committed.length > 0 && lines === 0) v(`final ${id}: delivery/committed but the owner never received it`);
    if (lines > 1) {
      if (idem) f.duplicateDeliveries += lines - 1;
      else v(`final ${id}: delivered ${lines} times to a non-idempotent owner`);
    }
  }

  // write-ahead, from the children's output: an effect starts only after its intent is durable
  lives.forEach((life, li) => {
    life.lines.forEach((l, at) => {
      let m = /^TOOL (\S+) (\S+) (\S+)$/.exec(l);
      if (m) {
        const c = calls.get(m[3]!);
        if (!c) return v(`life ${li + 1}: tool ${m[2]} started for ${m[3]} which has no tool/call in the log`);
        const exclusive = c.event.payload.mode === 'exclusive';
        const problem = writeAheadProblem(c.event, li, at, !exclusive);
        if (problem) v(`life ${li + 1}: ${m[2]} ${m[3]} started, but ${problem}`);
        return;
      }
      m = /^DELIVER (\S+) (\S+)$/.exec(l);
      if (m) {
        const fm = finals.get(`${m[1]}:${m[2]}`);
        if (!fm) return v(`life ${li + 1}: delivery of ${m[2]} which is not in the log`);
        const problem = writeAheadProblem(fm.event, li, at, true);
        if (problem) v(`life ${li + 1}: delivery of ${m[1]} ${m[2]} started, but ${problem}`);
      }
    });
  });
  const parallelStarts = new Map<string, number>();
  for (const life of lives)
    for (const l of life.lines) {
      const m = /^TOOL \S+ lookup (\S+)$/.exec(l);
      if (m) parallelStarts.set(m[1]!, (parallelStarts.get(m[1]!) ?? 0) + 1);
    }
  for (const n of parallelStarts.values()) if (n > 1) f.parallelReruns += n - 1;
}

/** The figures as table rows (name, value). */
export function figureRows(f: TortureFigures): [string, string | number][] {
  return [
    ['trials (fresh logs)', f.trials],
    ['child processes', f.lives],
    ['kills', f.kills],
    ...KILL_MODES.map((m): [string, number] => [`  kills in mode ${m}`, f.killsByMode[m]]),
    ...(['tool-inside', 'after-intent', 'inside-delivery', 'timer'] as const).map((p): [string, number] => [
      `  kills at ${p}`,
      f.killsByPoint[p],
    ]),
    ['runs', f.runs],
    ['runs settled', f.runsSettled],
    ...Object.entries(f.runStatuses).map(([s, n]): [string, number] => [`  settled ${s}`, n]),
    ['attempts (prompt + continue)', f.attempts],
    ['  continue attempts', f.continues],
    ['events in the logs', f.events],
    ['acknowledged events (each checked)', f.acked],
    ['exclusive calls', f.exclusiveCalls],
    ['  executed (result committed)', f.executedCalls],
    ['  reconciled', f.reconciledCalls],
    ['  uncertain', f.uncertainCalls],
    ['    uncertain with effect in ledger', f.uncertainWithEffect],
    ['tool ledger entries', f.ledgerEntries],
    ['parallel calls', f.parallelCalls],
    ['  parallel re-runs', f.parallelReruns],
    ['finals', f.finals],
    ['  delivery/committed', f.deliveredFinals],
    ['    redelivered after recovery', f.redeliveries],
    ['    duplicate deliveries (idempotent owner)', f.duplicateDeliveries],
    ['  delivery/unknown', f.deliveryUnknown],
    ['    unknown, in fact delivered', f.deliveryUnknownButDelivered],
    ['violations', f.violations.length],
  ];
}
