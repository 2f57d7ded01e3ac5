/**
 * bench/memory: what sessions keep in memory (issue 22 item 3) — per idle open session, and per
 * 1,000 sessions that ran a 5-step run (two tool calls a step) and were closed, on the memory
 * store, LMDB and PostgreSQL. Each store is measured in a child process of its own, after a
 * warm-up, from heap and RSS after a full garbage collection.
 *
 * An LMDB- or PostgreSQL-backed session keeps in memory what its synchronous API returns (the
 * surface: `snapshot().messages`), and a closed one nothing (test/runtime/close.test.ts checks that
 * it is garbage). The memory store keeps every record of every session by design: its row is the
 * store, not the sessions.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, memoryStore, postgresStore, type EventStore, type ModelProvider } from '../src/index.js';
import { createDatabase } from './store-postgres.js';
import { fmt, printTable } from './table.js';

const THIS_FILE = fileURLToPath(import.meta.url);
const CHILD_FLAG = '--memory-child';
const K = 5;
const SETTLED = 1000;
const IDLE = 200;

const tools = (['lookup', 'write'] as const).map((name) =>
  defineTool({
    name,
    description: name,
    mode: name === 'lookup' ? 'parallel' : 'exclusive',
    parameters: z.object({ i: z.number() }),
    execute: ({ i }) => `${name} ${i}`,
  }),
);
const model: ModelProvider = {
  modelId: 'scripted',
  async call(request) {
    const step = request.messages.filter((m) => m.role === 'tool').length / 2;
    if (step >= K - 1)
      return { message: { role: 'assistant', content: 'done' }, usage: { inputTokens: 1, outputTokens: 1 }, finishReason: 'stop' };
    const calls = tools.map((t) => ({ id: `${t.name}-${step}`, name: t.name, arguments: JSON.stringify({ i: step }) }));
    return {
      message: { role: 'assistant', content: '', toolCalls: calls },
      usage: { inputTokens: 1, outputTokens: 1 },
      finishReason: 'tool_calls',
    };
  },
};

interface ChildResult {
  settledHeap: number;
  idleHeap: number;
  rss: [number, number, number];
}

async function child(kind: string, dir: string): Promise<ChildResult> {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const settle = async () => {
    await new Promise((r) => setTimeout(r, 20));
    gc();
    gc();
    return process.memoryUsage();
  };
  let store: EventStore;
  let drop = async () => {};
  if (kind === 'memory') store = memoryStore();
  else if (kind === 'lmdb') store = lmdbStore({ path: join(dir, 'lmdb') });
  else {
    const db = await createDatabase(process.env.ACTORLOOP_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres');
    store = postgresStore({ connectionString: db.url });
    drop = db.drop;
  }
  const runtime = createRuntime({ store, model, tools, budget: { maxSteps: K + 1 } });
  const runSessions = async (prefix: string, n: number) => {
    for (let i = 0; i < n; i++) {
      const s = await runtime.openSession(`${prefix}-${i}`);
      const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
      if (r.status !== 'succeeded') throw new Error(`${kind}: ${r.status} ${r.error?.message ?? ''}`);
      await s.close();
    }
  };
  await runSessions('warm', 200);
  const m0 = await settle();
  await runSessions('settled', SETTLED);
  const m1 = await settle();
  const idle = [];
  for (let i = 0; i < IDLE; i++) idle.push(await runtime.openSession(`settled-${i}`)); // each with a 5-step run on its surface
  const m2 = await settle();
  for (const s of idle) await s.close();
  await runtime.close();
  await drop();
  return {
    settledHeap: ((m1.heapUsed - m0.heapUsed) / SETTLED) * 1000,
    idleHeap: (m2.heapUsed - m1.heapUsed) / IDLE,
    rss: [m0.rss, m1.rss, m2.rss],
  };
}

export async function benchMemory(): Promise<void> {
  const dir = mkdtempSync(join(process.env.ACTORLOOP_BENCH_TMP ?? tmpdir(), 'memory-'));
  try {
    const rows = [];
    for (const kind of ['memory', 'lmdb', 'postgres']) {
      let r: ChildResult;
      try {
        const out = execFileSync(process.execPath, ['--import', 'tsx', THIS_FILE, CHILD_FLAG, kind, dir], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        r = JSON.parse(out.trim().split('\n').at(-1)!) as ChildResult;
      } catch (e) {
        rows.push([
          kind,
          `failed: ${
            String((e as { stderr?: string }).stderr ?? e)
              .split('\n')
              .find((l) => l.trim()) ?? ''
          }`,
          '',
          '',
          '',
          '',
        ]);
        continue;
      }
      const mb = (b: number) => fmt(b / 1024 / 1024, 1);
      rows.push([kind, fmt(r.idleHeap / 1024, 1), fmt(r.settledHeap / 1024 / 1024, 2), ...r.rss.map(mb)]);
    }
    console.log(`\nbench/memory — after a full GC, in a child process per store; a session's run: ${K} steps, 2 tool calls each`);
    printTable(
      [
        'store',
        'heap KB per idle open session',
        `heap MB per ${fmt(SETTLED)} settled+closed sessions`,
        'RSS MB after warm-up',
        `RSS MB after ${fmt(SETTLED)} more settled`,
        `RSS MB with ${IDLE} idle open`,
      ],
      rows,
      ['left'],
    );
    console.log(
      'heap: growth of the JS heap after a full GC, per session; RSS: the process after a full GC (the allocator keeps freed pages, so RSS deltas say little)',
    );
    console.log(
      'the memory store keeps every record of every session (its row is the store); LMDB and PostgreSQL keep nothing of a closed session',
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === CHILD_FLAG && resolve(process.argv[1] ?? '') === THIS_FILE) {
  const r = await child(process.argv[3]!, process.argv[4]!);
  console.log(JSON.stringify(r));
  process.exit(0);
}
