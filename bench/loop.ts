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

export async function benchLoop(): Promise<void> {
  const dir = mkdtempSync(join(root(), 'loop-'));
  try {
    const floor = fsyncFloorUs(dir);
    const rows: (string | number)[][] = [];
    // warm up JIT on the memory store
    await runLoop(memoryStore(), 50, 'warm');
    for (const k of [50, 200]) {
      const mem = await runLoop(memoryStore(), k, `m${k}`);
      const store = lmdbStore({ path: join(dir, `lmdb-${k}`) });
      const before = { ...store.stats };
      const lm = await runLoop(store, k, `l${k}`);
      const commits = (store.stats.commits - before.commits) / k;
      const flushes = (store.stats.flushes - before.flushes) / k;
      await store.close();
      rows.push([`K=${k} LMDB durable`, fmt(lm), fmt(lm / floor, 2) + '× floor', fmt(commits, 2), fmt(flushes, 2)]);
      rows.push([`K=${k} memory store`, fmt(mem), '', '', '']);
      rows.push([`K=${k} hand-written loop`, fmt(handLoop(k), 2), '', '', '']);
    }
    const byName = (n: string) => Number(rows.find((r) => r[0] === n)![1]);
    console.log(`\nbench/loop — steps with 2 tool calls (1 parallel, 1 exclusive); fsync floor ${fmt(floor)} µs`);
    printTable(['workload', 'µs/step', 'ratio', 'commits/step', 'flushes/step'], rows, ['left']);
    console.log(
      `growth K=50→200: LMDB ${fmt(byName('K=200 LMDB durable') / byName('K=50 LMDB durable'), 2)}×, memory ${fmt(byName('K=200 memory store') / byName('K=50 memory store'), 2)}× (target ≤ 1.3×)`,
    );
    console.log('targets: durable ≤ 5× floor per step, ≤ 2 disk flushes per step; memory store ≤ 250 µs per step');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
