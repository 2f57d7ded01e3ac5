/**
 * bench/open: opening a session with a long history, and its first step (issue 22: opening is
 * O(1) in completed history; the first step after opening a session whose surface holds 40k
 * messages, nothing compacted, ≤ 200 ms).
 *
 * The long session is made once per run: the bench loop's workload (steps of two tool calls) on
 * the memory store, its records copied into an LMDB store (durable, the default) in large appends,
 * so that building 100k events takes seconds, not minutes. A short session (one run) is opened
 * beside it, and the long history compacted before one more run: O(1) in completed history means
 * those two open in about the same time.
 */
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, memoryStore, scriptedModel, type EventStore } from '../src/index.js';
import type { EventDraft } from '../src/contracts/events.js';
import { median, printTable, fmt } from './table.js';

const SURFACE_MESSAGES = Number(process.env.BENCH_OPEN_MESSAGES ?? 40_000);
const REPEATS = Number(process.env.BENCH_OPEN_REPEATS ?? 5);
const K = 200;
const root = () => process.env.ACTORLOOP_BENCH_TMP ?? tmpdir();

const lookup = defineTool({
  name: 'lookup',
  description: 'side-effect free',
  mode: 'parallel',
  parameters: z.object({ i: z.number() }),
  execute: ({ i }) => `value of item ${i}`,
});
const write = defineTool({
  name: 'write',
  description: 'side effect',
  parameters: z.object({ i: z.number() }),
  execute: ({ i }) => `wrote item ${i}`,
});
const tools = [lookup, write];
const config = { contextWindow: 10_000_000 };

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

/** Runs enough K-step runs on the memory store for `messages` surface messages; returns its records as drafts. */
async function history(messages: number): Promise<EventDraft[]> {
  const store = memoryStore();
  let runs = 0;
  const runtime = createRuntime({
    store,
    model: scriptedModel(Array.from({ length: Math.ceil(messages / (3 * K)) + 1 }, () => script(K)).flat()),
    tools,
    budget: { maxSteps: K + 1 },
    config,
  });
  const s = await runtime.openSession('long');
  while (s.snapshot().messages.length < messages) {
    const r = await s.execute({ kind: 'prompt', runId: `r${runs}`, attemptId: 'a', message: `run ${runs}` });
    if (r.status !== 'succeeded') throw new Error(`building the history: run ${runs} ended ${r.status}`);
    runs++;
  }
  await s.close();
  const drafts: EventDraft[] = [];
  for await (const e of store.readEvents('long')) {
    if (e.type === 'session/attached') continue;
    drafts.push({ type: e.type, turn: e.turn, step: e.step, attempt: e.attempt, surfaceOp: e.surfaceOp, payload: e.payload } as EventDraft);
  }
  await runtime.close();
  return drafts;
}

async function copyInto(store: EventStore, sessionId: string, drafts: readonly EventDraft[]): Promise<void> {
  const { writerEpoch, lastSeq } = await store.attachWriter(sessionId);
  let next = lastSeq + 1;
  for (let i = 0; i < drafts.length; i += 2000)
    next += (await store.append(sessionId, writerEpoch, next, drafts.slice(i, i + 2000))).length;
}

interface Sample {
  open: number;
  first: number;
  events: number;
  surface: number;
}

async function openAndStep(path: string, sessionId: string, n: number): Promise<Sample> {
  const store = lmdbStore({ path });
  const runtime = createRuntime({
    store,
    model: scriptedModel([
      {
        toolCalls: [
          { name: 'lookup', arguments: { i: -1 } },
          { name: 'write', arguments: { i: -1 } },
        ],
      },
      'done',
    ]),
    tools,
    config,
  });
  const t0 = performance.now();
  const s = await runtime.openSession(sessionId);
  const t1 = performance.now();
  const r = await s.execute({ kind: 'prompt', runId: `bench-${n}`, attemptId: 'a', message: 'one more' });
  const t2 = performance.now();
  if (r.status !== 'succeeded') throw new Error(`first step after opening ended ${r.status}`);
  const surface = s.snapshot().messages.length;
  const events = (await store.getHead(sessionId))!.lastSeq;
  await runtime.close();
  return { open: t1 - t0, first: (t2 - t1) / 2, events, surface };
}

export async function benchOpen(): Promise<void> {
  const dir = mkdtempSync(join(root(), 'open-'));
  try {
    const t0 = performance.now();
    const drafts = await history(SURFACE_MESSAGES);
    const path = join(dir, 'store');
    const store = lmdbStore({ path });
    await copyInto(store, 'long', drafts);
    const oneRun = drafts.slice(0, drafts.findIndex((d) => d.type === 'run/end') + 1);
    await copyInto(store, 'short', oneRun);
    // the long history, compacted before one more run: completed history that is off the surface
    const turn = drafts.at(-1)!.turn + 1;
    const again = oneRun.map((d) => ({ ...d, turn }) as EventDraft);
    const summary = {
      type: 'compaction',
      turn,
      step: 0,
      attempt: 1,
      surfaceOp: 'epoch',
      payload: {
        summary: { role: 'user', content: 'Summary of the conversation so far: many lookups and writes.' },
        replacedThroughSeq: drafts.length,
      },
    } as EventDraft;
    await copyInto(store, 'compacted', [...drafts, again[0]!, summary, ...again.slice(1)]);
    await store.close();
    console.log(`built: ${drafts.length} events in ${fmt((performance.now() - t0) / 1000, 1)} s`);
    const samples = new Map<string, Sample[]>();
    for (let rep = 0; rep < REPEATS; rep++) {
      for (const id of ['short', 'compacted', 'long']) samples.set(id, [...(samples.get(id) ?? []), await openAndStep(path, id, rep)]);
    }
    const rows = [...samples].map(([id, ss]) => {
      const last = ss.at(-1)!;
      return [id, fmt(last.events), fmt(last.surface), fmt(median(ss.map((s) => s.open)), 1), fmt(median(ss.map((s) => s.first)), 1)];
    });
    console.log(`\nbench/open — LMDB (flushed); median of ${REPEATS} opens, each in a fresh runtime and store`);
    printTable(['session', 'events in log', 'surface messages', 'openSession ms', 'first step ms (of a 2-step run)'], rows, ['left']);
    console.log('target: openSession O(1) in completed history; the first step after opening the long session ≤ 200 ms');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
