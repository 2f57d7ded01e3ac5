// Seeded randomized runs that check the log invariants under steering, inputs, store faults and
// restarts, complementing scenarios-runs.test.ts with actions it lacks: stopAfterCurrentToolRound (sometimes twice at once), steer / follow_up inputs
// (sometimes cancelled at once), releaseResources, concludesTurn tools, uncertain-hanging /
// cancelled outcomes, a tiny context window (frequent compaction), a flaky store (one append and
// one read fail once), close/reopen and abandon/reopen (crash) on the same LMDB file, approvals with
// random decisions, a random tool verifier and final verifier, budgets (maxSteps, maxToolCalls,
// maxCost with pricing).
//
// Env: SCENARIO_SEED (first seed, default 1), SCENARIO_COUNT (default 20), SCENARIO_ACTIONS (default 7),
// SCENARIO_DUMP=1 (print each log), SCENARIO_STATS=1 (print event/outcome counts), SCENARIO_VERBOSE=1.
// The same knobs drive scenarios-runs.test.ts: name the file to run one harness.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  lmdbStore,
  scriptedModel,
  isExecutionBusy,
  isValidationError,
  DEFAULT_COMPACTION_PROMPT,
  type ExecutionResult,
  type ExecutionSession,
  type ModelRequest,
  type Runtime,
  type ScriptedModel,
  type ScriptedStep,
} from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { flakyStore, type Flaky } from '../helpers/flaky-store.js';
import { logOf, SETTLED, sleep } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

/** xorshift32-based PRNG, independent of the one in scenarios-runs.test.ts. */
function prng(seed: number) {
  let x = (seed * 2654435761) >>> 0 || 0x9e3779b9;
  const next = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
  for (let i = 0; i < 5; i++) next();
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    chance: (p: number) => next() < p,
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!,
  };
}
type Rng = ReturnType<typeof prng>;

const timeout = <T>(p: Promise<T>, ms: number, what: string) =>
  Promise.race([p, new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`TIMEOUT: ${what} did not settle in ${ms} ms`)), ms))]);

const abortable = (ms: number, signal: AbortSignal) =>
  new Promise<void>((res, rej) => {
    if (signal.aborted) return rej(new Error('aborted'));
    const t = setTimeout(res, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), rej(new Error('aborted'))), { once: true });
  });

interface World {
  violations: string[];
  effects: Map<string, number>; // side effects of exclusive tools, by idempotencyKey
  delivered: Map<string, number>; // finalMessageId → deliveries
  models: ScriptedModel[];
  pending: { what: string; p: Promise<ExecutionResult | undefined> }[];
  results: ExecutionResult[];
  reportedUncertain: Set<string>; // callIds named by any recovery.uncertainToolCalls
  reportedOpen: Set<string>; // runIds named by any recovery.interruptedRuns
  acked: { inputs: Set<string>; stops: Set<string> }; // receipts returned (must be durable)
}

function makeTools(w: World, r: Rng) {
  const effect = (key: string) => w.effects.set(key, (w.effects.get(key) ?? 0) + 1);
  const args = z.object({ ms: z.number().default(0), big: z.boolean().default(false), v: z.number().default(0) });
  const out = (a: { big: boolean }, s: string) => (a.big ? `${s} ${'filler text '.repeat(25)}` : s);
  return [
    defineTool({
      name: 'look',
      description: 'reads',
      mode: 'parallel',
      parameters: args,
      execute: async (a, ctx) => (await abortable(a.ms, ctx.signal), out(a, 'seen')),
    }),
    defineTool({
      name: 'fetch',
      description: 'reads db',
      mode: 'parallel',
      resources: ['lock'],
      parameters: args,
      execute: async (a, ctx) => (await abortable(a.ms, ctx.signal), out(a, 'fetched')),
    }),
    defineTool({
      name: 'charge',
      description: 'charges (exclusive, reconcilable)',
      resources: ['card'],
      parameters: args,
      execute: async (a, ctx) => {
        await abortable(a.ms, ctx.signal);
        effect(ctx.idempotencyKey);
        return out(a, 'charged');
      },
      reconcile: (_a, ctx) => (w.effects.has(ctx.idempotencyKey) ? { kind: 'completed', content: 'already charged' } : undefined),
    }),
    defineTool({
      name: 'send',
      description: 'sends (exclusive, no reconcile)',
      parameters: args,
      execute: async (a, ctx) => {
        effect(ctx.idempotencyKey);
        await abortable(a.ms, ctx.signal);
        return out(a, 'sent');
      },
    }),
    defineTool({
      name: 'finish',
      description: 'concludes the turn',
      mode: r.chance(0.5) ? 'parallel' : 'exclusive',
      parameters: args,
      execute: async (a, ctx) => {
        await abortable(a.ms, ctx.signal);
        return { kind: 'completed', content: `concluded ${a.v}`, concludesTurn: true };
      },
    }),
    defineTool({
      name: 'hang',
      description: 'an uncertain outcome that locks "lock"',
      resources: ['lock'],
      parameters: args,
      execute: async (a, ctx) => {
        effect(ctx.idempotencyKey);
        await abortable(a.ms, ctx.signal).catch(() => undefined);
        if (a.v % 3 === 0) return { kind: 'uncertain-hanging', content: 'no idea', resourceLocks: ['lock'] };
        if (a.v % 3 === 1) return { kind: 'cancelled', settled: false, partialContent: 'half', resourceLocks: ['lock'] };
        return { kind: 'uncertain-settled', content: 'probably done' };
      },
    }),
    defineTool({
      name: 'stubborn',
      description: 'ignores its abort signal (cancel → uncertain-hanging after cancelGraceMs)',
      resources: ['lock'],
      parameters: args,
      execute: async (a, ctx) => {
        effect(ctx.idempotencyKey);
        await sleep(a.ms);
        return 'stubborn done';
      },
    }),
    defineTool({
      name: 'wire',
      description: 'needs approval',
      resources: ['bank'],
      needsApproval: true,
      parameters: args,
      execute: async (a, ctx) => {
        await abortable(a.ms, ctx.signal);
        effect(ctx.idempotencyKey);
        return 'wired';
      },
    }),
  ];
}

function makeModel(w: World, r: Rng, ids: { n: number }): ScriptedModel {
  const names = ['look', 'fetch', 'charge', 'send', 'finish', 'hang', 'stubborn', 'wire', 'look', 'charge'];
  const step = (req: ModelRequest): ScriptedStep => {
    if (req.tools.length === 0 && req.messages[0]?.content === DEFAULT_COMPACTION_PROMPT)
      return { text: `summary ${ids.n++}`, delayMs: r.chance(0.3) ? r.int(40) : 0 };
    const delayMs = r.chance(0.5) ? r.int(50) : 0;
    let rounds = 0;
    for (let i = req.messages.length - 1; i >= 0 && req.messages[i]!.role !== 'user'; i--)
      if (req.messages[i]!.role === 'assistant') rounds++;
    if (rounds >= 3 || r.chance(0.2)) return { text: `answer ${ids.n++}`, delayMs };
    const n = 1 + r.int(3);
    const toolCalls = Array.from({ length: n }, () => ({
      id: `k${ids.n++}`,
      name: r.pick(names),
      arguments: { ms: r.chance(0.5) ? r.int(120) : 0, big: r.chance(0.3), v: r.int(9) },
    }));
    return { toolCalls, delayMs, usage: { inputTokens: 10 + r.int(30), outputTokens: 5 + r.int(20) } };
  };
  const m = scriptedModel([step], { loop: true });
  w.models.push(m);
  return m;
}

const stats = new Map<string, number>();
const bump = (k: string, n = 1) => stats.set(k, (stats.get(k) ?? 0) + n);

async function scenario(seed: number, actions = 7): Promise<string[]> {
  const r = prng(seed);
  const dir = tempDir('actorloop-scenario-');
  const w: World = {
    violations: [],
    effects: new Map(),
    delivered: new Map(),
    models: [],
    pending: [],
    results: [],
    reportedUncertain: new Set(),
    reportedOpen: new Set(),
    acked: { inputs: new Set(), stops: new Set() },
  };
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  const ids = { n: 0 };
  const idempotent = r.chance(0.5);
  const tiny = r.chance(0.6);
  const config = {
    approvalTimeoutMs: 40,
    cancelGraceMs: 60,
    retryBackoffMs: 1,
    ...(tiny ? { contextWindow: 360, outputReserve: 30 } : {}),
  };
  const budget = {
    maxSteps: 3 + r.int(5),
    ...(r.chance(0.5) ? { maxToolCalls: 2 + r.int(5) } : {}),
    ...(r.chance(0.4) ? { maxCost: `0.0${2 + r.int(7)}` } : {}),
  };
  const verifyRate = r.chance(0.5) ? 0.15 : 0;
  const finalRejectRate = r.chance(0.5) ? 0.3 : 0;
  const flaky: Flaky = { failAppendIn: r.chance(0.5) ? 3 + r.int(20) : 0, failReadIn: 0, appendFailures: 0, readFailures: 0 };
  const open = (): Runtime =>
    createRuntime({
      store: flakyStore(lmdbStore({ path: dir.path }), flaky),
      model: makeModel(w, r, ids),
      tools: makeTools(w, r),
      config,
      budget,
      pricing: () => '0.01',
      verifier: verifyRate ? () => (r.chance(verifyRate) ? 'result rejected by verifier' : undefined) : undefined,
      finalVerifier: finalRejectRate ? () => (r.chance(finalRejectRate) ? 'final rejected' : undefined) : undefined,
      delivery: {
        idempotent,
        deliver: async (f) => {
          if (r.chance(0.3)) await sleep(r.int(40));
          w.delivered.set(f.finalMessageId, (w.delivered.get(f.finalMessageId) ?? 0) + 1);
        },
      },
    });
  let rt = open();
  const runtimes: Runtime[] = [rt];
  let s: ExecutionSession = await rt.openSession('s');
  const noteRecovery = (sess: ExecutionSession) => {
    for (const u of sess.recovery.uncertainToolCalls) w.reportedUncertain.add(u.callId);
    for (const o of sess.recovery.interruptedRuns) w.reportedOpen.add(o.runId);
  };
  noteRecovery(s);
  let runN = 0;
  let attN = 0;
  let keyN = 0;
  const trace: string[] = [];

  const track = (what: string, p: Promise<ExecutionResult>) => {
    const q = p.then(
      (res) => (w.results.push(res), res),
      (e) => {
        if (!isValidationError(e) && !isExecutionBusy(e)) w.violations.push(`${what}: execute rejected with ${e?.name}: ${e?.message}`);
        return undefined;
      },
    );
    w.pending.push({ what, p: q });
    return q;
  };

  const openRun = async () => {
    const log = await logOf(rt.store, 's');
    let o: { runId: string; epoch: number; pending?: { kind: string; questionId: string; calls?: { callId: string }[] } } | undefined;
    for (const e of log) {
      if (e.payload.copiedFrom !== undefined) continue;
      if (e.type === 'run/start') o = { runId: e.payload.runId as string, epoch: e.payload.runEpoch as number };
      if (e.type === 'run/suspended' && o) o.pending = e.payload.pendingRequest as never;
      if (e.type === 'run/end' && SETTLED.has(String(e.payload.status))) o = undefined;
    }
    return o;
  };

  const resume = async () => {
    const o = await openRun();
    if (!o) return undefined;
    const attemptId = `a${++attN}`;
    if (o.pending) {
      if (r.chance(0.15)) await sleep(50); // late: counts as denied
      const decisions: Record<string, 'approve' | 'deny'> = {};
      for (const c of o.pending.calls ?? []) if (r.chance(0.85)) decisions[c.callId] = r.chance(0.6) ? 'approve' : 'deny';
      trace.push(`respond ${o.runId}/${attemptId} ${JSON.stringify(decisions)}`);
      return track(
        `respond ${o.runId}`,
        s.execute({ kind: 'respond', runId: o.runId, attemptId, questionId: o.pending.questionId, answer: { decisions } }),
      );
    }
    trace.push(`continue ${o.runId}/${attemptId}`);
    return track(`continue ${o.runId}`, s.execute({ kind: 'continue', runId: o.runId, attemptId }));
  };

  const reopen = async (how: 'close' | 'abandon') => {
    if (how === 'close') await timeout(s.close(), 5000, 'session.close');
    rt = open();
    runtimes.push(rt);
    // an open that fails with the injected fault leaves `s` the closed (or abandoned) instance:
    // open again (each fault fires once), as an app would, instead of prompting a closed session
    s = await rt.openSession('s').catch((e: unknown) => {
      if (!/\(injected\)/.test(String((e as Error)?.message))) throw e;
      trace.push('(open failed: injected; opened again)');
      return rt.openSession('s');
    });
    noteRecovery(s);
    trace.push(
      `reopen(${how}) open=[${s.recovery.interruptedRuns.map((x) => x.runId)}] uncertain=[${s.recovery.uncertainToolCalls.map((u) => `${u.callId}:${u.resolution ?? ''}`)}] locks=[${s.recovery.activeResourceLocks}]`,
    );
  };

  if (tiny) {
    // earlier turns, so that the tiny window has something to compact (summaries)
    for (let k = 0; k < 2; k++) {
      const runId = `r${++runN}`;
      trace.push(`warm-up ${runId}`);
      await track(
        `prompt ${runId}`,
        s.execute({ kind: 'prompt', runId, attemptId: `a${++attN}`, message: `warm-up ${runN} ${'context '.repeat(30)}` }),
      );
      for (let d = 0; d < 3 && (await openRun()); d++) await resume();
    }
  }
  for (let i = 0; i < actions; i++) {
    const a = i === 0 && r.chance(0.8) ? 0 : r.int(100);
    try {
      if (a < 22) {
        if (await openRun()) await resume();
        else {
          const runId = `r${++runN}`;
          trace.push(`prompt ${runId}`);
          // left running on purpose: w.pending holds it, and a rejection becomes a violation
          void track(`prompt ${runId}`, s.execute({ kind: 'prompt', runId, attemptId: `a${++attN}`, message: `task ${runN}` }));
        }
      } else if (a < 34) {
        const mode = r.chance(0.5) ? 'steer' : 'follow_up';
        const inputId = `in${++runN}`;
        const cancelAtOnce = r.chance(0.3);
        trace.push(`submit ${mode} ${inputId}${cancelAtOnce ? ' +cancel' : ''}`);
        const sub = s.submitInput({ inputId, message: `more ${inputId}`, mode });
        void sub.then(
          (rec) => w.acked.inputs.add(rec.inputId),
          () => undefined,
        );
        if (cancelAtOnce) {
          const [rec, can] = await Promise.all([sub, s.cancelInput(inputId)]);
          if (rec.inputId !== inputId || can.inputId !== inputId)
            w.violations.push(`receipts for ${inputId}: ${JSON.stringify([rec, can])}`);
        } else await sub;
      } else if (a < 48) {
        const o = await openRun();
        if (o) {
          const twice = r.chance(0.5);
          const req = {
            sessionId: 's',
            sessionInstanceId: s.sessionInstanceId,
            interactionId: o.runId,
            expectedRunEpoch: o.epoch,
            idempotencyKey: `stop${++keyN}`,
          };
          trace.push(`stop ${o.runId}@${o.epoch}${twice ? ' x2' : ''}`);
          const ps = twice ? [s.stopAfterCurrentToolRound(req), s.stopAfterCurrentToolRound(req)] : [s.stopAfterCurrentToolRound(req)];
          const got = await Promise.allSettled(ps);
          if (got.some((g) => g.status === 'fulfilled')) w.acked.stops.add(req.idempotencyKey);
          for (const g of got)
            if (g.status === 'rejected' && g.reason?.name !== 'SessionSteeringConflict' && !/\(injected\)/.test(String(g.reason?.message)))
              w.violations.push(`stop threw ${g.reason?.name}: ${g.reason?.message}`);
          if (
            twice &&
            got.every((g) => g.status === 'fulfilled') &&
            JSON.stringify((got[0] as PromiseFulfilledResult<unknown>).value) !==
              JSON.stringify((got[1] as PromiseFulfilledResult<unknown>).value)
          ) {
            w.violations.push(`the same stop request sent twice got two receipts`);
          }
          if (
            twice &&
            got[0]!.status !== got[1]!.status &&
            !got.some((g) => g.status === 'rejected' && /\(injected\)/.test(String(g.reason?.message)))
          )
            w.violations.push(`the same stop request sent twice: ${got.map((g) => g.status)}`);
        }
      } else if (a < 54) {
        trace.push(`cancel ${await s.requestCancel()}`);
      } else if (a < 58) {
        trace.push(`detach ${s.requestDetach()}`);
      } else if (a < 64) {
        const keys = r.chance(0.5) ? ['lock'] : ['lock', 'card', 'bank'];
        trace.push(`release ${keys}`);
        await s.releaseResources(keys);
      } else if (a < 70) {
        if (r.chance(0.5)) flaky.failAppendIn = 1 + r.int(6);
        else flaky.failReadIn = 1 + r.int(3);
        trace.push(`flaky append=${flaky.failAppendIn} read=${flaky.failReadIn}`);
      } else if (a < 82) {
        const ms = r.int(60);
        await sleep(ms);
        const how = r.chance(0.4) ? 'close' : 'abandon';
        trace.push(`${how} after ${ms}`);
        await reopen(how);
        if (s.recovery.interruptedRuns.length && r.chance(0.7)) await resume();
      } else if (a < 95) {
        const ms = r.int(80);
        trace.push(`sleep ${ms}`);
        await sleep(ms);
      } else {
        trace.push('idle');
        await timeout(s.waitForIdle(), 5000, 'waitForIdle');
      }
    } catch (e) {
      // submitInput / cancelInput / stop / releaseResources may fail with the injected store error
      // (nothing promises otherwise); execute may not (checked in track)
      if (/\(injected\)/.test(String((e as Error)?.message))) {
        trace.push(`(failed: injected)`);
        continue;
      }
      // an openSession that failed (injected) after attaching fenced this instance: its writes are
      // refused with StaleWriterError (docs/guarantees.md); the next reopen makes a new instance
      if ((e as Error)?.name === 'StaleWriterError') {
        trace.push(`(failed: fenced instance)`);
        continue;
      }
      w.violations.push(`action ${trace.at(-1)} threw ${(e as Error).name}: ${(e as Error).message}`);
    }
  }
  // drain: no more injected faults; settle everything, resume open runs until none is left
  flaky.failAppendIn = 0;
  flaky.failReadIn = 0;
  for (let k = 0; k < 10; k++) {
    await timeout(s.waitForIdle(), 5000, 'waitForIdle').catch((e) => w.violations.push(String(e)));
    if (!(await openRun())) break;
    const res = await resume().catch((e) => w.violations.push(`drain resume threw ${e}`));
    if (res && typeof res === 'object' && res.status === 'blocked') {
      trace.push('release for drain');
      await s.releaseResources(['lock', 'card', 'bank']).catch(() => undefined);
    }
    await sleep(1);
  }
  await timeout(s.waitForIdle(), 5000, 'waitForIdle').catch((e) => w.violations.push(String(e)));
  for (const { what, p } of w.pending) await timeout(p, 6000, what).catch((e) => w.violations.push(String(e)));
  await sleep(250); // abandoned runtimes' slow tools finish
  const log = await logOf(rt.store, 's');
  // a run still open after the drain must be reported by recovery on the next open
  const stillOpen = await openRun();
  if (stillOpen) {
    await reopen('close');
    if (!s.recovery.interruptedRuns.some((x) => x.runId === stillOpen.runId))
      w.violations.push(`run ${stillOpen.runId} is open in the log but recovery does not report it`);
  }
  check(w, log, budget, idempotent);
  if (unhandled.length) w.violations.push(`unhandled rejections: ${unhandled.map((e) => String((e as Error)?.stack ?? e)).join('; ')}`);
  if (process.env.SCENARIO_DUMP)
    console.log(
      `seed ${seed}`,
      JSON.stringify({ budget, config, idempotent }),
      '\n' + trace.join('\n'),
      '\n' + log.map((e) => `${e.seq} ${e.type} t${e.turn}s${e.step}a${e.attempt} ${JSON.stringify(e.payload).slice(0, 200)}`).join('\n'),
    );
  if (process.env.SCENARIO_STATS) {
    for (const e of log) bump(e.type);
    for (const e of log) if (e.type === 'tool/result') bump('outcome:' + (e.payload.outcome as { kind: string }).kind);
    for (const e of log) if (e.type === 'run/end') bump('end:' + e.payload.status);
    for (const t of trace) bump('act:' + t.split(' ')[0]);
    bump('appendFailures', flaky.appendFailures);
    bump('readFailures', flaky.readFailures);
  }
  for (const x of runtimes) await x.close().catch(() => undefined);
  process.off('unhandledRejection', onUnhandled);
  await dir.cleanup();
  return w.violations.map((v) => `seed ${seed}: ${v}\n  trace: ${trace.join(' | ')}`);
}

function check(w: World, log: EventRecord[], budget: { maxToolCalls?: number }, idempotent: boolean) {
  const v = w.violations;
  log.forEach((e, i) => e.seq !== i + 1 && v.push(`seq ${e.seq} at index ${i}`));
  // every tool call in every request has its result in that request, right after its message
  for (const m of w.models) {
    m.requests.forEach((req, ri) => {
      const msgs = req.messages;
      for (let i = 0; i < msgs.length; i++) {
        const msg = msgs[i]!;
        if (msg.role === 'assistant' && msg.toolCalls?.length) {
          const want = new Set(msg.toolCalls.map((c) => c.id));
          const got: string[] = [];
          let j = i + 1;
          while (j < msgs.length && msgs[j]!.role === 'tool') got.push(msgs[j++]!.toolCallId!);
          if (!(got.length === want.size && got.every((g) => want.has(g)) && new Set(got).size === got.length)) {
            v.push(`request ${ri}: assistant calls [${[...want]}] answered by [${got}] (next: ${msgs[j]?.role ?? 'end'})`);
          }
          i = j - 1;
        } else if (msg.role === 'tool') v.push(`request ${ri}: tool message ${msg.toolCallId} without its call`);
      }
    });
  }
  const own = log.filter((e) => e.payload.copiedFrom === undefined);
  // no acknowledged event lost: every receipt returned names a durable event
  for (const id of w.acked.inputs)
    if (!log.some((e) => e.type === 'input/accepted' && e.payload.inputId === id))
      v.push(`input ${id} was acknowledged but input/accepted is not in the log`);
  for (const k of w.acked.stops)
    if (!log.some((e) => e.type === 'steering/accepted' && (e.payload.request as { idempotencyKey?: string }).idempotencyKey === k))
      v.push(`stop ${k} was acknowledged but steering/accepted is not in the log`);
  // exclusive side effects at most once per idempotencyKey, unless reported uncertain
  const callByKey = new Map<string, EventRecord>();
  for (const e of own) if (e.type === 'tool/call') callByKey.set(e.payload.idempotencyKey as string, e);
  const resultsOf = new Map<string, EventRecord[]>();
  for (const e of own)
    if (e.type === 'tool/result') resultsOf.set(e.payload.callId as string, [...(resultsOf.get(e.payload.callId as string) ?? []), e]);
  for (const [k, n] of w.effects) {
    if (n <= 1) continue;
    const call = callByKey.get(k);
    const callId = call?.payload.callId as string | undefined;
    const uncertain =
      callId &&
      (w.reportedUncertain.has(callId) ||
        (resultsOf.get(callId) ?? []).some((e) => String((e.payload.outcome as { kind: string }).kind).startsWith('uncertain')));
    if (!uncertain) v.push(`exclusive effect ${k} ran ${n} times without being reported uncertain`);
  }
  // an effect that started without its tool/call being durable
  for (const k of w.effects.keys()) if (!callByKey.has(k)) v.push(`effect ${k} ran but its tool/call is not in the log`);
  // every settled run's tool calls have exactly one result
  const runOf = (e: EventRecord) => e; // events carry no runId; track by order
  void runOf;
  let cur = '';
  const callsOfRun = new Map<string, string[]>();
  const runEnds = new Map<string, EventRecord[]>();
  const finals = new Map<string, EventRecord[]>();
  for (const e of own) {
    if (e.type === 'run/start') cur = e.payload.runId as string;
    if (e.type === 'tool/call') callsOfRun.set(cur, [...(callsOfRun.get(cur) ?? []), e.payload.callId as string]);
    if (e.type === 'run/end' && SETTLED.has(String(e.payload.status)))
      runEnds.set(e.payload.runId as string, [...(runEnds.get(e.payload.runId as string) ?? []), e]);
    if (e.type === 'final/message') finals.set(e.payload.runId as string, [...(finals.get(e.payload.runId as string) ?? []), e]);
  }
  for (const [runId, ends] of runEnds) {
    if (ends.length !== 1) v.push(`run ${runId} settled ${ends.length} times (${ends.map((e) => e.payload.status)})`);
    for (const c of callsOfRun.get(runId) ?? []) {
      const n = (resultsOf.get(c) ?? []).length;
      if (n !== 1) v.push(`settled run ${runId}: tool/call ${c} has ${n} tool/result events`);
    }
  }
  for (const c of [...callsOfRun.values()].flat()) if ((resultsOf.get(c) ?? []).length > 1) v.push(`tool/call ${c} has several results`);
  const starts = new Set(own.filter((e) => e.type === 'run/start').map((e) => e.payload.runId as string));
  for (const runId of starts)
    if (!runEnds.has(runId) && !w.reportedOpen.has(runId)) v.push(`run ${runId} never settled and no recovery reported it open`);
  // at most one final per run; each final delivered at most once to a non-idempotent owner; exactly one delivery record
  for (const [runId, fs] of finals) if (fs.length > 1) v.push(`run ${runId} has ${fs.length} final/message events`);
  for (const f of own.filter((e) => e.type === 'final/message')) {
    const id = f.payload.finalMessageId as string;
    const d = log.filter(
      (e) => (e.type === 'delivery/committed' || e.type === 'delivery/unknown') && e.payload.finalMessageId === id && e.seq > f.seq,
    );
    if (d.length > 1 || (d.length === 0 && runEnds.has(f.payload.runId as string)))
      v.push(`final ${id} has ${d.length} delivery records (${d.map((e) => e.type)})`);
    if (!idempotent && (w.delivered.get(id) ?? 0) > 1)
      v.push(`final ${id} delivered ${w.delivered.get(id)} times to a non-idempotent owner`);
    const end = runEnds.get(f.payload.runId as string)?.[0];
    if (end && !['succeeded', 'delivery_unknown'].includes(String(end.payload.status)))
      v.push(`run ${f.payload.runId} committed final ${id} but ended ${end.payload.status}`);
  }
  for (const e of log)
    if (e.type === 'delivery/committed' && !w.delivered.has(e.payload.finalMessageId as string))
      v.push(`delivery/committed ${e.payload.finalMessageId} never reached the owner`);
  for (const id of w.delivered.keys())
    if (!own.some((e) => e.type === 'final/message' && e.payload.finalMessageId === id)) v.push(`final ${id} delivered but not in the log`);
  // each execute result agrees with the log
  for (const res of w.results) {
    const ends = runEnds.get(res.runId) ?? [];
    if (SETTLED.has(res.status) && res.checkpointCommitted) {
      if (ends.length === 0) v.push(`result ${res.runId}/${res.attemptId} ${res.status} (checkpointCommitted) has no settled run/end`);
      else if (ends[0]!.payload.status !== res.status)
        v.push(`result ${res.runId}/${res.attemptId} is ${res.status} but the log's run/end is ${ends[0]!.payload.status}`);
    }
    if (res.finalMessageId) {
      const f = finals.get(res.runId)?.[0];
      if (!f || f.payload.finalMessageId !== res.finalMessageId)
        v.push(`result ${res.runId} names final ${res.finalMessageId} the log does not hold`);
      else if (res.finalMessage !== undefined && res.finalMessage !== f.payload.content)
        v.push(`result ${res.runId} final text differs from the log`);
    }
    if (res.status === 'succeeded' && res.checkpointCommitted && !finals.has(res.runId))
      v.push(`result ${res.runId} succeeded without a final/message`);
  }
  // the stop: after steering/accepted for run R, R makes at most the model call under way (one
  // assistant/message) until its attempt ends; a later attempt of R (continue / respond) calls no model
  for (const sa of own.filter((e) => e.type === 'steering/accepted')) {
    const runId = (sa.payload.request as { interactionId: string }).interactionId;
    let inRun = false;
    let answers = 0;
    let attemptEnded = false;
    for (const e of own) {
      if (e.type === 'run/start') inRun = e.payload.runId === runId;
      if (e.seq <= sa.seq) continue;
      if (inRun && e.type === 'assistant/message') {
        answers++;
        if (attemptEnded)
          v.push(
            `run ${runId}: a later attempt called the model after the stop was accepted (steering/accepted seq ${sa.seq}, assistant/message seq ${e.seq})`,
          );
        else if (answers > 1) v.push(`run ${runId}: ${answers} model answers after the stop was accepted (seq ${sa.seq}), at seq ${e.seq}`);
      }
      if (e.type === 'run/end' && e.payload.runId === runId) {
        if (SETTLED.has(String(e.payload.status))) break;
        attemptEnded = true;
      }
    }
  }
  // budget: no step starts tool calls once maxToolCalls is reached
  if (budget.maxToolCalls !== undefined) {
    const perRun = new Map<string, { n: number; step: number }>();
    let run = '';
    for (const e of own) {
      if (e.type === 'run/start') run = e.payload.runId as string;
      if (e.type === 'tool/call') {
        const st = perRun.get(run) ?? { n: 0, step: -1 };
        if (e.step !== st.step && st.n >= budget.maxToolCalls)
          v.push(`run ${run}: step ${e.step} starts tool calls after ${st.n} >= maxToolCalls ${budget.maxToolCalls}`);
        perRun.set(run, { n: st.n + 1, step: e.step });
      }
    }
  }
}

// Each violation this harness can find is also kept as a deterministic test in the topic files
// (stop-after-round, follow-ups, store-failures).
const BASE = Number(process.env.SCENARIO_SEED ?? 1);
const COUNT = Number(process.env.SCENARIO_COUNT ?? 20);
const ACTIONS = Number(process.env.SCENARIO_ACTIONS ?? 7);

describe('randomized scenarios with steering, inputs, store faults and restarts (seeded)', () => {
  it(
    `${COUNT} seeds × ${ACTIONS} actions keep the invariants`,
    async () => {
      const all: string[] = [];
      for (let seed = BASE; seed < BASE + COUNT; seed++) {
        const out = await scenario(seed, ACTIONS);
        if (process.env.SCENARIO_VERBOSE && out.length) console.log(out.join('\n'));
        all.push(...out);
      }
      if (process.env.SCENARIO_STATS) console.log(Object.fromEntries([...stats].sort()));
      expect(all).toEqual([]);
    },
    COUNT * 8_000 + 60_000,
  );
});
