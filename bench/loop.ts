/**
 * bench/loop: the scripted agent workload of issue 3 — K steps, each with two instant tool calls
 * (one parallel, one exclusive) — through the whole runtime, on durable LMDB and on the memory
 * store, next to the same loop written by hand. Reports µs per step, commits and disk flushes
 * per step, and K=50 vs K=200 (cost must not grow with history).
 */
import { mkdtempSync, mkdirSync, openSync, writeSync, fdatasyncSync, fsyncSync, closeSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { z } from 'zod';
import { createActor, fromPromise, waitFor, type AnyActorLogic } from 'xstate';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { createRuntime, defineTool, lmdbStore, memoryStore, scriptedModel, type EventStore, type RuntimeOptions } from '../src/index.js';
import type { CallModelInput, CallModelOutput } from '../src/actors/call-model.js';
import type { CommitIntentInput, CommitIntentOutput } from '../src/actors/commit-intent.js';
import type { EndRunInput } from '../src/actors/end-run.js';
import type { DeliverFinalInput, DeliverFinalOutput, FinalAnswerInput, VerifyFinalOutput } from '../src/actors/final-answer.js';
import { callActor } from '../src/actors/tool-call.js';
import { LoopBudget } from '../src/contracts/config.js';
import type { EventDraft } from '../src/contracts/events.js';
import { runMachine } from '../src/machines/run.machine.js';
import { toolBatchMachine } from '../src/machines/tool-batch.machine.js';
import { MARK_END, MARK_START, straceAvailable, straceChildRun, syncDetail, totalSyncs, TRACED } from './strace.js';
import { median, printTable, fmt } from './table.js';

const THIS_FILE = fileURLToPath(import.meta.url);
const CHILD_FLAG = '--strace-child';
const STRACE_K = 100;

const root = () => process.env.ACTORLOOP_BENCH_TMP ?? tmpdir();

function fsyncFloorUs(dir: string, n = 300): number {
  const fd = openSync(join(dir, 'floor'), 'w');
  const buf = Buffer.alloc(64, 1);
  const ts: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    writeSync(fd, buf, 0, 64, 0);
    fdatasyncSync(fd);
    ts.push(Number(process.hrtime.bigint() - t) / 1000);
  }
  closeSync(fd);
  return median(ts);
}

const par = defineTool({
  name: 'lookup',
  description: 'side-effect free',
  mode: 'parallel',
  parameters: z.object({ i: z.number() }),
  execute: ({ i }) => `v${i}`,
});
const exc = defineTool({ name: 'write', description: 'side effect', parameters: z.object({ i: z.number() }), execute: ({ i }) => `w${i}` });

function script(k: number) {
  const steps = [];
  for (let i = 0; i < k - 1; i++)
    steps.push({
      toolCalls: [
        { name: 'lookup', arguments: { i } },
        { name: 'write', arguments: { i } },
      ],
      usage: { inputTokens: 1, outputTokens: 1 },
    });
  steps.push({ text: 'done', usage: { inputTokens: 1, outputTokens: 1 } });
  return steps;
}

/** Spans recorded and kept in memory (reset after every run), for the tracing-on rows. */
const spans = new InMemorySpanExporter();
const tracingOn: RuntimeOptions['tracing'] = {
  tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }),
};

async function runLoop(store: EventStore, k: number, sessionId: string, tracing?: RuntimeOptions['tracing']): Promise<number> {
  const runtime = createRuntime({
    store,
    model: scriptedModel(script(k)),
    tools: [par, exc],
    budget: { maxSteps: k + 1 },
    config: { contextWindow: 10_000_000 },
    ...(tracing !== undefined ? { tracing } : {}),
  });
  const s = await runtime.openSession(sessionId);
  const t0 = performance.now();
  const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
  const us = ((performance.now() - t0) * 1000) / k;
  if (r.status !== 'succeeded' || r.steps !== k) throw new Error(`bench run did not succeed: ${r.status} after ${r.steps} steps`);
  await s.close();
  spans.reset();
  return us;
}

/** How a bench makes promise actor logic for the fake phases: XState's `fromPromise` by default. */
export type Promised = <O, I>(fn: (args: { input: I }) => Promise<O>) => AnyActorLogic;
export const viaFromPromise: Promised = (fn) => fromPromise(fn as never);

/**
 * The run and tool-batch machines with every effect an instant fake (no store, no model, no
 * tools) — the same actors and events per step as the real loop. Returns a function that runs
 * one K-step run through them.
 */
export function machinesWithInstantEffects(promised: Promised = viaFromPromise): (k: number) => Promise<void> {
  const calls = (i: number) => [
    { callId: `p${i}`, name: 'lookup', arguments: { i }, mode: 'parallel' as const, resources: [], idempotencyKey: `p${i}` },
    { callId: `x${i}`, name: 'write', arguments: { i }, mode: 'exclusive' as const, resources: [], idempotencyKey: `x${i}` },
  ];
  let n = 0;
  let k = 0;
  const machine = runMachine.provide({
    actors: {
      startRun: promised(async () => ({ runStartSeq: 2 })),
      prepareContext: promised(async () => ({})),
      callModel: promised<CallModelOutput, CallModelInput>(async () =>
        ++n < k
          ? { kind: 'toolCalls' as const, toolCalls: [], finishReason: 'tool_calls' as const, usage: { inputTokens: 1, outputTokens: 1 } }
          : { kind: 'answer' as const, content: 'done' },
      ),
      commitIntent: promised<CommitIntentOutput, CommitIntentInput>(async () => ({ kind: 'intents', calls: calls(n) })),
      commitResults: promised(async () => ({ rejections: 0 })),
      settleResults: promised(async () => undefined),
      verifyFinal: promised<VerifyFinalOutput, FinalAnswerInput>(async () => ({ kind: 'accepted' })),
      commitFinal: promised(async () => ({ finalMessageId: 'f' })),
      deliverFinal: promised<DeliverFinalOutput, DeliverFinalInput>(async () => ({ kind: 'delivered' })),
      endRun: promised(async ({ input }: { input: EndRunInput }) => input.result),
      toolBatch: toolBatchMachine.provide({
        actors: {
          toolCall: callActor(async ({ call }) => ({
            callId: call.callId,
            name: call.name,
            outcome: { kind: 'completed', content: 'ok', isError: false, concludesTurn: false, releaseResources: [] },
            startedAt: 0,
            endedAt: 0,
          })),
        },
      }),
    } as never,
  });
  return async (steps: number) => {
    n = 0;
    k = steps;
    const input = {
      runId: 'r',
      attemptId: 'a',
      runEpoch: 1,
      turn: 1,
      kind: 'prompt' as const,
      messages: [],
      executionProfileFingerprint: 'f',
      budget: LoopBudget.parse({ maxSteps: steps + 1 }),
      maxProtocolCorrections: 2,
      maxParallelTools: 4,
      startedAt: Date.now(),
    };
    const actor = createActor(machine, { input }).start();
    const snap = await waitFor(actor, (s) => s.status === 'done', { timeout: 600_000 });
    if (snap.output?.status !== 'succeeded') throw new Error(`machines-only run ended ${snap.output?.status}`);
  };
}

/** Where the time goes, part 1: the machines alone (above), µs per step of one K-step run. */
async function machinesOnly(k: number): Promise<number> {
  const run = machinesWithInstantEffects();
  const t0 = performance.now();
  await run(k);
  return ((performance.now() - t0) * 1000) / k;
}

/** Where the time goes, part 2: the memory store alone, appending what one step commits (7 events, 2 appends). */
async function storeOnly(k: number): Promise<number> {
  const store = memoryStore();
  const { writerEpoch, lastSeq } = await store.attachWriter('s');
  let seq = lastSeq + 1;
  const ev = (
    type: EventDraft['type'],
    step: number,
    surfaceOp: EventDraft['surfaceOp'],
    payload: Record<string, unknown>,
  ): EventDraft => ({ type, turn: 1, step, attempt: 1, surfaceOp, payload });
  const outcome = (content: string) => ({ kind: 'completed', content, isError: false, concludesTurn: false, releaseResources: [] });
  const t0 = performance.now();
  for (let i = 1; i <= k; i++) {
    const intent = [
      ev('step/start', i, 'none', {}),
      ev('assistant/message', i, 'append', {
        message: {
          role: 'assistant',
          content: '',
          toolCalls: [
            { id: `p${i}`, name: 'lookup', arguments: `{"i":${i}}` },
            { id: `x${i}`, name: 'write', arguments: `{"i":${i}}` },
          ],
        },
        usage: { inputTokens: 1, outputTokens: 1 },
        finishReason: 'tool_calls',
        latencyMs: 0.1,
        requestDigest: '0'.repeat(64),
      }),
      ev('tool/call', i, 'none', {
        callId: `p${i}`,
        name: 'lookup',
        arguments: { i },
        mode: 'parallel',
        resources: [],
        idempotencyKey: `s/r/p${i}`,
      }),
      ev('tool/call', i, 'none', {
        callId: `x${i}`,
        name: 'write',
        arguments: { i },
        mode: 'exclusive',
        resources: [],
        idempotencyKey: `s/r/x${i}`,
      }),
    ];
    seq += (await store.append('s', writerEpoch, seq, intent)).length;
    const results = [
      ev('tool/result', i, 'append', { callId: `p${i}`, name: 'lookup', outcome: outcome(`v${i}`), startedAt: 1, endedAt: 1 }),
      ev('tool/result', i, 'append', { callId: `x${i}`, name: 'write', outcome: outcome(`w${i}`), startedAt: 1, endedAt: 1 }),
      ev('step/end', i, 'none', { usage: { inputTokens: 1, outputTokens: 1 } }),
    ];
    seq += (await store.append('s', writerEpoch, seq, results)).length;
  }
  const us = ((performance.now() - t0) * 1000) / k;
  await store.close();
  return us;
}

/**
 * A flush target like the journal's: a file pre-filled with zeros and flushed, so that writing
 * into it and `fdatasync`-ing needs no file-size update (the cheapest durable write there is).
 */
class FlushFile {
  private readonly fd: number;
  private offset = 0;
  static readonly SIZE = 16 * 1024 * 1024;
  constructor(path: string) {
    this.fd = openSync(path, 'w+');
    const zeros = Buffer.alloc(1024 * 1024);
    for (let off = 0; off < FlushFile.SIZE; off += zeros.length) writeSync(this.fd, zeros, 0, zeros.length, off);
    fsyncSync(this.fd);
  }
  /** Writes `buf` after the previous write (wrapping at the end) and flushes it. */
  write(buf: Buffer): void {
    if (this.offset + buf.length > FlushFile.SIZE) this.offset = 0;
    writeSync(this.fd, buf, 0, buf.length, this.offset);
    this.offset += buf.length;
    fdatasyncSync(this.fd);
  }
  close(): void {
    closeSync(this.fd);
  }
}

/**
 * Lower bound 1: the memory store, plus one write + fdatasync of the commit's records (as JSON)
 * per append — what a durable store would cost if LMDB and the journal took no CPU at all.
 */
function memoryPlusFlush(file: FlushFile): EventStore {
  const store = memoryStore();
  const append: EventStore['append'] = async (...args) => {
    const records = await store.append(...args);
    file.write(Buffer.from(JSON.stringify(records)));
    return records;
  };
  return new Proxy(store, {
    get: (target, prop) => (prop === 'append' ? append : Reflect.get(target, prop, target)),
  });
}

/** Lower bound 2: the hand-written loop with two writes + fdatasyncs per step (no runtime at all). */
function handLoopFlushed(k: number, file: FlushFile): number {
  const history: { role: string; content: string }[] = [{ role: 'user', content: 'go' }];
  const steps = script(k);
  const intent = Buffer.alloc(1500, 0x61);
  const results = Buffer.alloc(700, 0x62);
  const t0 = performance.now();
  for (let i = 0; i < k; i++) {
    const step = steps[i]!;
    history.push({ role: 'assistant', content: step.text ?? '' });
    file.write(intent);
    for (const c of step.toolCalls ?? [])
      history.push({ role: 'tool', content: c.name === 'lookup' ? `v${c.arguments.i}` : `w${c.arguments.i}` });
    file.write(results);
  }
  return ((performance.now() - t0) * 1000) / k;
}

/** The same loop as plain function calls, for reference. */
function handLoop(k: number): number {
  const history: { role: string; content: string }[] = [{ role: 'user', content: 'go' }];
  const steps = script(k);
  const t0 = performance.now();
  for (let i = 0; i < k; i++) {
    const step = steps[i]!;
    history.push({ role: 'assistant', content: step.text ?? '' });
    for (const c of step.toolCalls ?? [])
      history.push({ role: 'tool', content: c.name === 'lookup' ? `v${c.arguments.i}` : `w${c.arguments.i}` });
  }
  return ((performance.now() - t0) * 1000) / k;
}

const REPEATS = 5;
/** Warm-up runs of every workload (200 steps each) before measuring. */
const WARMUP_RUNS = 12;

/** Disk syncs per step of the durable loop, counted by strace in a child process. */
function straceLoop(dir: string): string {
  if (!straceAvailable()) return 'strace not installed: disk syncs per step not counted';
  const c = straceChildRun(THIS_FILE, [CHILD_FLAG, join(dir, 'strace-db')], join(dir, 'strace'), dirname(dirname(THIS_FILE)));
  if (typeof c === 'string') return `strace could not count syncs (${c})`;
  return (
    `strace (\`strace -f -e ${TRACED}\`, K=${STRACE_K} durable steps in a child process): ` +
    `${fmt(totalSyncs(c) / c.ops, 2)} disk syncs per step — ${syncDetail(c).replace('per op: ', '')} per step; ` +
    `fdatasync alone (what \`strace -c -e trace=fdatasync,fsync\` counts): ${fmt((c.fdatasync + c.fsync) / c.ops, 2)}`
  );
}

/** The child side: one durable K-step loop between two marker opens; prints `{ pid, ops }`. */
async function straceChild(dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const mark = (name: string) => closeSync(openSync(join(dir, name), 'w'));
  const store = lmdbStore({ path: join(dir, 'db') });
  const runtime = createRuntime({
    store,
    model: scriptedModel(script(STRACE_K)),
    tools: [par, exc],
    budget: { maxSteps: STRACE_K + 1 },
    config: { contextWindow: 10_000_000 },
  });
  const s = await runtime.openSession('traced');
  mark(MARK_START);
  const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
  mark(MARK_END);
  if (r.status !== 'succeeded') throw new Error(`traced run ended ${r.status}`);
  await s.close();
  await store.close();
  console.log(JSON.stringify({ pid: process.pid, ops: STRACE_K }));
}

export async function benchLoop(): Promise<void> {
  const dir = mkdtempSync(join(root(), 'loop-'));
  const file = new FlushFile(join(dir, 'lower-bound'));
  try {
    // Warm the JIT: on this 2-core machine V8 needs about 2,500 steps before the loop's hot code
    // is optimised (a fresh process's first 200-step run costs 3–5× the steady state). The
    // figures below are the steady state a long-running runtime sees; the cold first run is
    // printed too.
    const cold = await runLoop(memoryStore(), 200, 'cold');
    for (let i = 0; i < WARMUP_RUNS; i++) {
      await runLoop(memoryStore(), 200, `warm${i}`);
      await runLoop(memoryStore(), 200, `warm${i}`, false);
      await runLoop(memoryStore(), 200, `warm${i}`, tracingOn);
      const store = lmdbStore({ path: join(dir, `warm-${i}`) });
      await runLoop(store, 200, `warm${i}`);
      await store.close();
      const committed = lmdbStore({ path: join(dir, `warmc-${i}`), durability: 'committed' });
      await runLoop(committed, 200, `warm${i}`);
      await committed.close();
      await machinesOnly(200);
      await storeOnly(200);
      await runLoop(memoryPlusFlush(file), 200, `warm${i}`);
      handLoopFlushed(200, file);
    }
    // Interleaved: each repeat runs every workload at both K, so K=50 and K=200 (and the floor)
    // see the same machine conditions; each figure is the median over the repeats.
    const KS = [50, 200] as const;
    const samples = new Map<string, number[]>();
    const add = (key: string, v: number) => samples.set(key, [...(samples.get(key) ?? []), v]);
    const stats = new Map(KS.map((k) => [k, { commits: 0, flushes: 0, flushMicros: 0, steps: 0 }]));
    let n = 0;
    for (let rep = 0; rep < REPEATS; rep++) {
      add('floor', fsyncFloorUs(dir, 100));
      for (const k of KS) {
        add(`mem${k}`, await runLoop(memoryStore(), k, `m${k}-${n++}`));
        add(`memoff${k}`, await runLoop(memoryStore(), k, `mo${k}-${n++}`, false));
        add(`memtraced${k}`, await runLoop(memoryStore(), k, `mt${k}-${n++}`, tracingOn));
        const store = lmdbStore({ path: join(dir, `lmdb-${k}-${n++}`) });
        add(`lmdb${k}`, await runLoop(store, k, `l${k}`));
        const st = stats.get(k)!;
        st.commits += store.stats.commits;
        st.flushes += store.stats.flushes;
        st.flushMicros += store.stats.flushMicros;
        st.steps += k;
        await store.close();
        const committed = lmdbStore({ path: join(dir, `lmdbc-${k}-${n++}`), durability: 'committed' });
        add(`committed${k}`, await runLoop(committed, k, `c${k}`));
        await committed.close();
        add(`hand${k}`, handLoop(k));
        add(`machines${k}`, await machinesOnly(k));
        add(`store${k}`, await storeOnly(k));
        add(`memflush${k}`, await runLoop(memoryPlusFlush(file), k, `f${k}-${n++}`));
        add(`handflush${k}`, handLoopFlushed(k, file));
      }
    }
    const us = (key: string) => median(samples.get(key)!);
    const floor = us('floor');
    const rows: (string | number)[][] = [];
    for (const k of KS) {
      const mem = us(`mem${k}`);
      const lm = us(`lmdb${k}`);
      const st = stats.get(k)!;
      rows.push([
        `K=${k} LMDB durable`,
        fmt(lm),
        `${fmt(lm / floor, 2)}× floor`,
        fmt(st.commits / st.steps, 2),
        fmt(st.flushes / st.steps, 2),
      ]);
      const inFlush = st.flushMicros / st.steps;
      const perFlush = st.flushMicros / st.flushes;
      rows.push([
        `K=${k}  of which: waiting in flushes (mean)`,
        fmt(inFlush),
        `${fmt(perFlush)} µs a flush = ${fmt(perFlush / floor, 2)}× floor`,
        '',
        '',
      ]);
      rows.push([`K=${k}  of which: the rest (CPU)`, fmt(lm - inFlush), `${fmt((lm - inFlush) / floor, 2)}× floor`, '', '']);
      rows.push([
        `K=${k} lower bound: memory store + 1 write & fdatasync per commit`,
        fmt(us(`memflush${k}`)),
        `${fmt(us(`memflush${k}`) / floor, 2)}× floor`,
        '',
        '',
      ]);
      rows.push([
        `K=${k} lower bound: hand-written loop + 2 writes & fdatasyncs`,
        fmt(us(`handflush${k}`)),
        `${fmt(us(`handflush${k}`) / floor, 2)}× floor`,
        '',
        '',
      ]);
      rows.push([
        `K=${k} LMDB 'committed' (no journal, no flush)`,
        fmt(us(`committed${k}`)),
        `${fmt(us(`committed${k}`) / floor, 2)}× floor`,
        '',
        '',
      ]);
      rows.push([`K=${k} memory store (tracing default: @opentelemetry/api installed, no provider: no-op)`, fmt(mem), '', '', '']);
      rows.push([`K=${k} memory store, tracing off (tracing: false)`, fmt(us(`memoff${k}`)), '', '', '']);
      rows.push([
        `K=${k} memory store, tracing on (spans recorded, in-memory exporter)`,
        fmt(us(`memtraced${k}`)),
        `+${fmt(us(`memtraced${k}`) - us(`memoff${k}`))} µs over off`,
        '',
        '',
      ]);
      rows.push([`K=${k} hand-written loop`, fmt(us(`hand${k}`), 2), '', '', '']);
      rows.push([
        `K=${k}  of which: machines alone`,
        fmt(us(`machines${k}`)),
        `${fmt((100 * us(`machines${k}`)) / mem)}% of memory`,
        '',
        '',
      ]);
      rows.push([`K=${k}  of which: memory store alone`, fmt(us(`store${k}`)), `${fmt((100 * us(`store${k}`)) / mem)}% of memory`, '', '']);
    }
    rows.push(['K=200 memory store, first run of the process (cold JIT)', fmt(cold), '', '', '']);
    console.log(
      `\nbench/loop — steps with 2 tool calls (1 parallel, 1 exclusive); after ${WARMUP_RUNS} warm-up runs of each workload, median of ${REPEATS} interleaved repeats; fsync floor ${fmt(floor)} µs (median of ${REPEATS}×100)`,
    );
    printTable(['workload', 'µs/step', 'ratio', 'commits/step', 'flushes/step'], rows, ['left']);
    console.log(straceLoop(dir));
    console.log(
      `growth K=50→200: LMDB ${fmt(us('lmdb200') / us('lmdb50'), 2)}×, memory ${fmt(us('mem200') / us('mem50'), 2)}× (target ≤ 1.3×)`,
    );
    console.log('targets: durable ≤ 5× floor per step, ≤ 2 disk flushes per step; memory store ≤ 250 µs per step');
    console.log("commits/step counts the run's open and close commits too (2 per run), hence slightly over 2.");
    console.log('"machines alone": the run + toolBatch machines with instant fake effects (same actors and events per step);');
    console.log('"memory store alone": the 2 appends (7 events) one step commits. The rest of the memory row is the effects');
    console.log('themselves (model step, tool calls, surface, envelopes) and garbage collection.');
    console.log("LMDB 'committed': the same loop on the same store without its journal (not power-safe): LMDB's own CPU share.");
    console.log('"waiting in flushes": time inside the journal\'s fdatasync calls (mean over all repeats; the rows above are');
    console.log('medians, so "the rest" is approximate). A flush inside the loop costs more than the idle floor: the vCPU');
    console.log('halts while the disk works and the code after it runs with cold caches (docs/performance.md).');
    console.log('Lower bounds: the memory-store loop plus one plain write + fdatasync per commit (what a durable store with no');
    console.log('CPU of its own would cost: no LMDB, no journal), and the hand-written loop plus two of them per step.');
  } finally {
    file.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

// Child entry point: `tsx bench/loop.ts --strace-child <dir>` (spawned under strace).
if (process.argv[2] === CHILD_FLAG && resolve(process.argv[1] ?? '') === THIS_FILE) {
  await straceChild(process.argv[3]!);
}
