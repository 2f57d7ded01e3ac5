/**
 * bench/loop: the scripted agent workload of issue 3 — K steps, each with two instant tool calls
 * (one parallel, one exclusive) — through the whole runtime, on durable LMDB and on the memory
 * store, next to the same loop written by hand. Reports µs per step, commits and disk flushes
 * per step, and K=50 vs K=200 (cost must not grow with history).
 */
import { mkdtempSync, openSync, writeSync, fdatasyncSync, closeSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, memoryStore, scriptedModel, type EventStore } from '../src/index.js';
import { median, printTable, fmt } from './table.js';

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

const par = defineTool({ name: 'lookup', description: 'side-effect free', mode: 'parallel', parameters: z.object({ i: z.number() }), execute: ({ i }) => `v${i}` });
const exc = defineTool({ name: 'write', description: 'side effect', parameters: z.object({ i: z.number() }), execute: ({ i }) => `w${i}` });

function script(k: number) {
  const steps = [];
  for (let i = 0; i < k - 1; i++) steps.push({ toolCalls: [{ name: 'lookup', arguments: { i } }, { name: 'write', arguments: { i } }], usage: { inputTokens: 1, outputTokens: 1 } });
  steps.push({ text: 'done', usage: { inputTokens: 1, outputTokens: 1 } });
  return steps;
}

async function runLoop(store: EventStore, k: number, sessionId: string): Promise<number> {
  const runtime = createRuntime({ store, model: scriptedModel(script(k)), tools: [par, exc], budget: { maxSteps: k + 1 }, config: { contextWindow: 10_000_000 } });
  const s = await runtime.openSession(sessionId);
  const t0 = performance.now();
  const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
  const us = ((performance.now() - t0) * 1000) / k;
  if (r.status !== 'succeeded' || r.steps !== k) throw new Error(`bench run did not succeed: ${r.status} after ${r.steps} steps`);
  await s.close();
  return us;
}

/** The same loop as plain function calls, for reference. */
function handLoop(k: number): number {
  const history: { role: string; content: string }[] = [{ role: 'user', content: 'go' }];
  const steps = script(k);
  const t0 = performance.now();
  for (let i = 0; i < k; i++) {
    const step = steps[i]!;
    history.push({ role: 'assistant', content: step.text ?? '' });
    for (const c of step.toolCalls ?? []) history.push({ role: 'tool', content: c.name === 'lookup' ? `v${c.arguments.i}` : `w${c.arguments.i}` });
  }
  return ((performance.now() - t0) * 1000) / k;
}

const REPEATS = 5;

async function medianOf(f: () => Promise<number>): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < REPEATS; i++) xs.push(await f());
  return median(xs);
}

export async function benchLoop(): Promise<void> {
  const dir = mkdtempSync(join(root(), 'loop-'));
  try {
    const floor = fsyncFloorUs(dir);
    // warm the JIT: the first runs of a process are several times slower
    for (let i = 0; i < 3; i++) await runLoop(memoryStore(), 200, `warm${i}`);
    const us: Record<string, number> = {};
    const rows: (string | number)[][] = [];
    let n = 0;
    for (const k of [50, 200]) {
      const mem = await medianOf(() => runLoop(memoryStore(), k, `m${k}-${n++}`));
      const stats = { commits: 0, flushes: 0, steps: 0 };
      const lm = await medianOf(async () => {
        const store = lmdbStore({ path: join(dir, `lmdb-${k}-${n++}`) });
        const t = await runLoop(store, k, `l${k}`);
        stats.commits += store.stats.commits;
        stats.flushes += store.stats.flushes;
        stats.steps += k;
        await store.close();
        return t;
      });
      const hand = await medianOf(async () => handLoop(k));
      us[`lmdb${k}`] = lm;
      us[`mem${k}`] = mem;
      rows.push([`K=${k} LMDB durable`, fmt(lm), `${fmt(lm / floor, 2)}× floor`, fmt(stats.commits / stats.steps, 2), fmt(stats.flushes / stats.steps, 2)]);
      rows.push([`K=${k} memory store`, fmt(mem), '', '', '']);
      rows.push([`K=${k} hand-written loop`, fmt(hand, 2), '', '', '']);
    }
    console.log(`\nbench/loop — steps with 2 tool calls (1 parallel, 1 exclusive); median of ${REPEATS}; fsync floor ${fmt(floor)} µs`);
    printTable(['workload', 'µs/step', 'ratio', 'commits/step', 'flushes/step'], rows, ['left']);
    console.log(`growth K=50→200: LMDB ${fmt(us.lmdb200! / us.lmdb50!, 2)}×, memory ${fmt(us.mem200! / us.mem50!, 2)}× (target ≤ 1.3×)`);
    console.log('targets: durable ≤ 5× floor per step, ≤ 2 disk flushes per step; memory store ≤ 250 µs per step');
    console.log('commits/step counts the run\'s open and close commits too (2 per run), hence slightly over 2.');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
