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
import { logOf, SETTLED, sleep } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

/** Small deterministic PRNG (mulberry32). */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    chance: (p: number) => next() < p,
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!,
  };
}

const withTimeout = <T>(p: Promise<T>, ms: number, what: string) =>
  Promise.race([p, new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`TIMEOUT: ${what} did not settle in ${ms} ms`)), ms))]);

const wait = (ms: number, signal: AbortSignal) =>
  new Promise<void>((res, rej) => {
    if (signal.aborted) return rej(new Error('aborted'));
    const t = setTimeout(res, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), rej(new Error('aborted'))), { once: true });
  });

interface World {
  violations: string[];
  effects: Map<string, number>; // exclusive effects by idempotencyKey
  delivered: Map<string, number>;
  models: ScriptedModel[];
  pending: { what: string; p: Promise<ExecutionResult | undefined> }[];
  results: ExecutionResult[];
}

function makeTools(w: World, r: ReturnType<typeof rng>) {
  const effect = (key: string) => w.effects.set(key, (w.effects.get(key) ?? 0) + 1);
  const args = z.object({ ms: z.number().default(0), big: z.boolean().default(false) });
  const out = (a: { big: boolean }, s: string) => (a.big ? `${s} ${'lorem ipsum '.repeat(120)}` : s);
  return [
    defineTool({
      name: 'look',
      description: 'read',
      mode: 'parallel',
      parameters: args,
      execute: async (a, ctx) => (await wait(a.ms, ctx.signal), out(a, 'seen')),
    }),
    defineTool({
      name: 'fetch',
      description: 'read db',
      mode: 'parallel',
      resources: ['db'],
      parameters: args,
      execute: async (a, ctx) => (await wait(a.ms, ctx.signal), out(a, 'fetched')),
    }),
    defineTool({
      name: 'charge',
      description: 'charges the card',
      resources: ['card'],
      parameters: args,
      execute: async (a, ctx) => {
        await wait(a.ms, ctx.signal);
        effect(ctx.idempotencyKey);
        return out(a, 'charged');
      },
      reconcile: (_a, ctx) => (w.effects.has(ctx.idempotencyKey) ? { kind: 'completed', content: 'it was charged' } : undefined),
    }),
    defineTool({
      name: 'send',
      description: 'sends mail',
      parameters: args,
      execute: async (a, ctx) => {
        effect(ctx.idempotencyKey);
        await wait(a.ms, ctx.signal);
        return out(a, 'sent');
      },
    }),
    defineTool({
      name: 'boom',
      description: 'throws',
      mode: r.chance(0.5) ? 'parallel' : 'exclusive',
      parameters: args,
      execute: () => {
        throw new Error('boom');
      },
    }),
    defineTool({
      name: 'wire',
      description: 'needs approval',
      resources: ['bank'],
      needsApproval: true,
      parameters: args,
      execute: async (a, ctx) => {
        await wait(a.ms, ctx.signal);
        effect(ctx.idempotencyKey);
        return 'wired';
      },
    }),
  ];
}

function makeModel(w: World, r: ReturnType<typeof rng>, ids: { n: number }): ScriptedModel {
  const names = ['look', 'fetch', 'charge', 'send', 'boom', 'wire'];
  const step = (req: ModelRequest): ScriptedStep => {
    if (req.tools.length === 0 && req.messages[0]?.content === DEFAULT_COMPACTION_PROMPT) return 'summary of earlier turns';
    const delayMs = r.chance(0.5) ? r.int(60) : 0;
    // at most a few tool rounds since the last user message
    let rounds = 0;
    for (let i = req.messages.length - 1; i >= 0 && req.messages[i]!.role !== 'user'; i--)
      if (req.messages[i]!.role === 'assistant') rounds++;
    if (rounds >= 3 || r.chance(0.15)) return { text: `answer ${ids.n++}`, delayMs };
    const n = 1 + r.int(3);
    const toolCalls = Array.from({ length: n }, () => ({
      id: `c${ids.n++}`,
      name: r.pick(names),
      arguments: { ms: r.chance(0.5) ? r.int(150) : 0, big: r.chance(0.4) },
    }));
    return { toolCalls, delayMs };
  };
  const m = scriptedModel([step], { loop: true });
  w.models.push(m);
  return m;
}

const stats = new Map<string, number>();

async function scenario(seed: number, actions = 6): Promise<string[]> {
  const r = rng(seed);
  const dir = tempDir();
  const w: World = { violations: [], effects: new Map(), delivered: new Map(), models: [], pending: [], results: [] };
  const ids = { n: 0 };
  const idempotent = r.chance(0.5);
  const slowDelivery = r.chance(0.3);
  const config: Record<string, number> = {
    approvalTimeoutMs: 30,
    cancelGraceMs: 200,
    retryBackoffMs: 1,
    ...(r.chance(0.4) ? { contextWindow: 900, outputReserve: 100 } : {}),
  };
  const budget = r.chance(0.5) ? { maxToolCalls: 2 + r.int(4), maxSteps: 8 } : { maxSteps: 8 };
  const open = (): Runtime =>
    createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: makeModel(w, r, ids),
      tools: makeTools(w, r),
      config,
      budget,
      delivery: {
        idempotent,
        deliver: async (f) => {
          if (slowDelivery) await sleep(r.int(80));
          w.delivered.set(f.finalMessageId, (w.delivered.get(f.finalMessageId) ?? 0) + 1);
        },
      },
    });
  let rt = open();
  let s: ExecutionSession = await rt.openSession('s');
  let runN = 0;
  let attN = 0;
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
    let open: { runId: string; epoch: number; pending?: { questionId: string; calls: { callId: string }[] } } | undefined;
    for (const e of log) {
      if (e.type === 'run/start') open = { runId: e.payload.runId as string, epoch: e.payload.runEpoch as number };
      if (e.type === 'run/suspended' && open) open.pending = e.payload.pendingRequest as never;
      if (e.type === 'run/end' && SETTLED.has(String(e.payload.status))) open = undefined;
      if (e.type === 'run/start' && open) open.pending = undefined;
    }
    return open;
  };

  /** resumes the open run (respond to a pending approval, else continue) */
  const resume = async (opts: { timeout?: boolean } = {}) => {
    const o = await openRun();
    if (!o) return undefined;
    const attemptId = `a${++attN}`;
    if (o.pending) {
      if (opts.timeout) await sleep(40);
      const decisions: Record<string, 'approve' | 'deny'> = {};
      for (const c of o.pending.calls ?? []) if (r.chance(0.8)) decisions[c.callId] = r.chance(0.6) ? 'approve' : 'deny';
      trace.push(`respond ${o.runId}/${attemptId} ${JSON.stringify(decisions)}${opts.timeout ? ' (late)' : ''}`);
      return track(
        `respond ${o.runId}`,
        s.execute({ kind: 'respond', runId: o.runId, attemptId, questionId: o.pending.questionId, answer: { decisions } }),
      );
    }
    trace.push(`continue ${o.runId}/${attemptId}`);
    return track(`continue ${o.runId}`, s.execute({ kind: 'continue', runId: o.runId, attemptId }));
  };

  for (let i = 0; i < actions; i++) {
    const a = i === 0 && r.chance(0.7) ? 0 : r.int(100);
    try {
      if (a < 25) {
        const o = await openRun();
        if (o) await resume({ timeout: r.chance(0.2) });
        else {
          const runId = `r${++runN}`;
          trace.push(`prompt ${runId}`);
          // left running on purpose: w.pending holds it, and a rejection becomes a violation
          void track(`prompt ${runId}`, s.execute({ kind: 'prompt', runId, attemptId: `a${++attN}`, message: `do things ${runN}` }));
        }
      } else if (a < 35) {
        const mode = r.chance(0.5) ? 'steer' : 'follow_up';
        const inputId = `in${++runN}`;
        trace.push(`submit ${mode} ${inputId}`);
        await s.submitInput({ inputId, message: `more ${inputId}`, mode });
      } else if (a < 43) {
        trace.push(`cancel ${await s.requestCancel()}`);
      } else if (a < 50) {
        trace.push(`detach ${s.requestDetach()}`);
      } else if (a < 58) {
        const o = await openRun();
        if (o) {
          trace.push(`stop ${o.runId}@${o.epoch}`);
          await s
            .stopAfterCurrentToolRound({
              sessionId: 's',
              sessionInstanceId: s.sessionInstanceId,
              interactionId: o.runId,
              expectedRunEpoch: o.epoch,
              idempotencyKey: `k${i}`,
            })
            .catch((e) => {
              if (e?.name !== 'SessionSteeringConflict') throw e;
            });
        }
      } else if (a < 72) {
        // crash: abandon the runtime mid-run, open a new one on the same path
        const ms = r.int(60);
        await sleep(ms);
        trace.push(`crash after ${ms}`);
        rt = open();
        s = await rt.openSession('s');
        for (const run of s.recovery.interruptedRuns) {
          trace.push(`recover ${run.runId} ${run.pendingRequest ? 'pending' : ''}`);
          await resume({ timeout: r.chance(0.2) });
          break;
        }
      } else if (a < 94) {
        const ms = r.int(80);
        trace.push(`sleep ${ms}`);
        await sleep(ms);
      } else {
        trace.push('idle');
        await withTimeout(s.waitForIdle(), 5000, 'waitForIdle');
      }
    } catch (e) {
      w.violations.push(`action ${trace.at(-1)} threw ${(e as Error).name}: ${(e as Error).message}`);
    }
  }
  // drain: settle everything, then resume open runs until none is left
  for (let k = 0; k < 8; k++) {
    await withTimeout(s.waitForIdle(), 5000, 'waitForIdle').catch((e) => w.violations.push(String(e)));
    if (!(await openRun())) break;
    await resume().catch((e) => w.violations.push(`drain resume threw ${e}`));
    await sleep(1);
  }
  await withTimeout(s.waitForIdle(), 5000, 'waitForIdle').catch((e) => w.violations.push(String(e)));
  for (const { what, p } of w.pending) await withTimeout(p, 5000, what).catch((e) => w.violations.push(String(e)));
  await sleep(300); // let abandoned runtimes' slow tools finish
  const log = await logOf(rt.store, 's');
  check(w, log, budget.maxToolCalls, idempotent);
  if (process.env.SCENARIO_DUMP)
    console.log(
      JSON.stringify(budget),
      log.map((e) => `${e.seq} ${e.type} t${e.turn}s${e.step}a${e.attempt} ${JSON.stringify(e.payload).slice(0, 160)}`).join('\n'),
    );
  if (process.env.SCENARIO_STATS) {
    for (const e of log) stats.set(e.type, (stats.get(e.type) ?? 0) + 1);
    for (const e of log)
      if (e.type === 'tool/result')
        stats.set(
          'outcome:' + (e.payload.outcome as { kind: string }).kind,
          (stats.get('outcome:' + (e.payload.outcome as { kind: string }).kind) ?? 0) + 1,
        );
    for (const e of log) if (e.type === 'run/end') stats.set('end:' + e.payload.status, (stats.get('end:' + e.payload.status) ?? 0) + 1);
    if (config.contextWindow) stats.set('smallWindow', (stats.get('smallWindow') ?? 0) + 1);
    for (const m of w.models)
      for (const q of m.requests)
        stats.set(
          'maxReqChars',
          Math.max(
            stats.get('maxReqChars') ?? 0,
            q.messages.reduce((n, x) => n + x.content.length, 0),
          ),
        );
    for (const t of trace) stats.set('act:' + t.split(' ')[0], (stats.get('act:' + t.split(' ')[0]) ?? 0) + 1);
  }
  await rt.close();
  await dir.cleanup();
  return w.violations.map((v) => `seed ${seed}: ${v}\n  trace: ${trace.join(' | ')}`);
}

function check(w: World, log: EventRecord[], maxToolCalls: number | undefined, idempotent: boolean) {
  const v = w.violations;
  // seqs contiguous from 1
  log.forEach((e, i) => e.seq !== i + 1 && v.push(`seq ${e.seq} at index ${i}`));
  // the surface the model saw: every tool call answered exactly once, right after it
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
          const ok = got.length === want.size && got.every((g) => want.has(g)) && new Set(got).size === got.length;
          if (!ok) v.push(`request ${ri}: assistant calls [${[...want]}] answered by [${got}] (next: ${msgs[j]?.role ?? 'end'})`);
          i = j - 1;
        } else if (msg.role === 'tool') v.push(`request ${ri}: tool message ${msg.toolCallId} without its call`);
      }
    });
  }
  // exclusive effects at most once
  for (const [k, n] of w.effects) if (n > 1) v.push(`exclusive effect ${k} ran ${n} times`);
  // every logged tool call has exactly one result; a call that had an effect was not recorded as never started
  const own = log.filter((e) => e.payload.copiedFrom === undefined);
  const results = new Map<string, EventRecord[]>();
  for (const e of own)
    if (e.type === 'tool/result') results.set(e.payload.callId as string, [...(results.get(e.payload.callId as string) ?? []), e]);
  for (const e of own) {
    if (e.type !== 'tool/call') continue;
    const rs = results.get(e.payload.callId as string) ?? [];
    if (rs.length !== 1) v.push(`tool/call ${e.payload.callId} has ${rs.length} tool/result events`);
    const kind = (rs[0]?.payload.outcome as { kind: string } | undefined)?.kind;
    if (w.effects.has(e.payload.idempotencyKey as string) && kind === 'skipped')
      v.push(`call ${e.payload.callId} had its effect but is recorded skipped`);
  }
  // inputs consumed at most once
  const used = new Map<string, number>();
  for (const e of own) {
    const id =
      e.type === 'user/message'
        ? e.payload.inputId
        : e.type === 'run/start' && e.payload.kind === 'follow_up'
          ? e.payload.inputId
          : undefined;
    if (typeof id === 'string') used.set(id, (used.get(id) ?? 0) + 1);
  }
  for (const [id, n] of used) if (n > 1) v.push(`input ${id} consumed ${n} times`);
  // a committed delivery was really delivered
  for (const e of log)
    if (e.type === 'delivery/committed' && !w.delivered.has(e.payload.finalMessageId as string))
      v.push(`delivery/committed ${e.payload.finalMessageId} never reached the owner`);
  // finals: exactly one delivery record each; owner got each at most once unless idempotent
  const finals = log.filter((e) => e.type === 'final/message' && e.payload.copiedFrom === undefined);
  for (const f of finals) {
    const id = f.payload.finalMessageId as string;
    const d = log.filter(
      (e) => (e.type === 'delivery/committed' || e.type === 'delivery/unknown') && e.payload.finalMessageId === id && e.seq > f.seq,
    );
    if (d.length !== 1) v.push(`final ${id} has ${d.length} delivery records (${d.map((e) => e.type)})`);
    if (!idempotent && (w.delivered.get(id) ?? 0) > 1)
      v.push(`final ${id} delivered ${w.delivered.get(id)} times to a non-idempotent owner`);
  }
  // run/end for every settled result; budgets per run
  for (const res of w.results) {
    if (
      SETTLED.has(res.status) &&
      !log.some((e) => e.type === 'run/end' && e.payload.runId === res.runId && SETTLED.has(String(e.payload.status)))
    ) {
      v.push(`result ${res.runId}/${res.attemptId} ${res.status} has no settled run/end`);
    }
  }
  const starts = new Set(log.filter((e) => e.type === 'run/start').map((e) => e.payload.runId as string));
  for (const runId of starts) {
    if (!log.some((e) => e.type === 'run/end' && e.payload.runId === runId && SETTLED.has(String(e.payload.status))))
      v.push(`run ${runId} never settled after drain`);
  }
  if (maxToolCalls !== undefined) {
    // budgets are checked after every step: a step may overshoot, but no step may start calls
    // once the run's count reached the limit
    const perRun = new Map<string, { n: number; step: number }>();
    let cur = '';
    for (const e of log) {
      if (e.type === 'run/start') cur = e.payload.runId as string;
      if (e.type === 'tool/call' && e.payload.copiedFrom === undefined) {
        const st = perRun.get(cur) ?? { n: 0, step: -1 };
        if (e.step !== st.step && st.n >= maxToolCalls)
          v.push(`run ${cur}: step ${e.step} starts tool calls after ${st.n} >= maxToolCalls ${maxToolCalls}`);
        perRun.set(cur, { n: st.n + 1, step: e.step });
      }
    }
  }
}

describe('randomized runs with tools, approvals, cancels, detaches and crashes (seeded)', () => {
  it(
    '30 seeds × 6 actions keep the log invariants',
    async () => {
      const all: string[] = [];
      const base = Number(process.env.SCENARIO_SEED ?? 1);
      const count = Number(process.env.SCENARIO_COUNT ?? 30);
      const actions = Number(process.env.SCENARIO_ACTIONS ?? 6);
      for (let seed = base; seed < base + count; seed++) all.push(...(await scenario(seed, actions)));
      if (process.env.SCENARIO_STATS) console.log(Object.fromEntries([...stats].sort()));
      expect(all).toEqual([]);
    },
    Number(process.env.SCENARIO_COUNT ?? 30) * 5_000 + 60_000,
  );
});
