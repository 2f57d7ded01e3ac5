import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  agentTool,
  createRuntime,
  defineAgent,
  defineTool,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type EventStore,
  type ModelProvider,
  type ServeEvent,
} from '../../src/index.js';
import { childOf, CALLS, ledgerKeys, ROOT, RUN, treeViolations } from '../crash/agent-tree.js';
import { killAllChildren, REPO_ROOT, sleep, spawnTs, until, type ChildRun } from '../crash/child-util.js';
import { scaled } from '../helpers/load.js';
import { logOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// Under runtime.serve a child session is run by its parent's call, in the worker that holds the
// parent; a worker that takes the parent over recovers the whole tree.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await killAllChildren();
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('agents under runtime.serve', () => {
  it('the worker holding the parent runs its child; the child is never claimed on its own', async () => {
    const store = memoryStore();
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: scriptedModel(['tea: a drink']) });
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'researcher', arguments: { input: 'tea?' } }] }, 'Tea is a drink.']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    const worker = runtime.serve();
    const events: ServeEvent[] = [];
    worker.events$.subscribe((e) => events.push(e));
    cleanups.push(() => worker.stop());
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'what is tea?' });
    const r = await runtime.waitForResult('s', 'r', { signal: AbortSignal.timeout(60_000) });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Tea is a drink.' });
    expect((await logOf(store, 's/r/1/c1')).some((e) => e.type === 'run/end' && e.payload.status === 'succeeded')).toBe(true);
    const claimed = events.flatMap((e) => (e.type === 'claimed' ? [e.sessionId] : []));
    expect(claimed).toEqual(['s']);
    expect(worker.sessions).not.toContain('s/r/1/c1');
  });

  it(
    'a worker SIGKILLed while it holds a parent whose child runs: the other worker takes the tree over, each answer committed once, no ledger entry twice',
    async () => {
      const dir = tempDir('actorloop-agent-serve-');
      cleanups.push(() => dir.cleanup());
      // two real worker processes serving the agent tree (test/crash/agent-tree.ts) from one LMDB file
      const workers = [1, 2].map((i) =>
        spawnTs(join(REPO_ROOT, 'test/crash/agent-tree-child.ts'), [dir.path, 'none', `lmdb:${dir.path}`, 'serve'], {
          label: `worker ${i}`,
        }),
      );
      for (const w of workers) await w.waitFor((l) => l === 'READY', 120_000, 'READY');
      const store: EventStore = lmdbStore({ path: join(dir.path, 'db') });
      const runtime = createRuntime({ store });
      cleanups.push(() => runtime.close());
      await runtime.submit(ROOT, { kind: 'input', inputId: RUN, mode: 'follow_up', message: 'research alpha and beta' });
      // the worker that claimed the root is killed while a child's run is open in its log
      const claimedRoot = (w: ChildRun) => w.lines.includes(`EV claimed ${ROOT}`);
      const deadline = Date.now() + scaled(60_000);
      let holder: ChildRun | undefined;
      let running: string | undefined;
      while (!running && Date.now() < deadline) {
        holder ??= workers.find(claimedRoot);
        for (const c of CALLS) {
          const log = await logOf(store, childOf(c));
          if (log.some((e) => e.type === 'run/start') && !log.some((e) => e.type === 'run/end')) running = c;
        }
        if (!running) await sleep(2);
      }
      expect(running, 'no child run seen open').toBeDefined();
      holder ??= workers.find(claimedRoot);
      expect(holder, 'no worker claimed the root').toBeDefined();
      holder!.signal('SIGKILL');
      expect((await holder!.waitExit(30_000)).signal).toBe('SIGKILL');
      const other = workers.find((w) => w !== holder)!;
      const r = await runtime.waitForResult(ROOT, RUN, { signal: AbortSignal.timeout(scaled(90_000)), pollMs: 50 });
      expect(r).toMatchObject({ status: 'succeeded', uncertainCalls: [] });
      expect(other.lines, other.describe()).toContain(`EV claimed ${ROOT}`);
      // the root was taken over (a later writer) and resumed its open agent calls: each child started once
      const rootLog = await logOf(store, ROOT);
      expect(new Set(rootLog.filter((e) => e.type === 'session/attached').map((e) => e.writerEpoch)).size).toBeGreaterThanOrEqual(2);
      const child = await logOf(store, childOf(running!));
      expect(child.filter((e) => e.type === 'run/start' && e.payload.kind === 'prompt')).toHaveLength(1);
      expect(child.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['succeeded']);
      expect(await treeViolations(store, join(dir.path, 'ledger'))).toEqual([]);
      expect(ledgerKeys(join(dir.path, 'ledger')).length).toBeLessThanOrEqual(2);
      other.send('EXIT');
      await other.waitExit(30_000);
    },
    scaled(240_000),
  );
});

describe("a child's request under runtime.serve", () => {
  it("a child's approval suspends the served parent; a respond submitted to the parent's inbox reaches the child", async () => {
    const store = memoryStore();
    const charges: string[] = [];
    const charge = defineTool({
      name: 'charge',
      description: 'charges',
      parameters: z.object({ n: z.number() }),
      mode: 'exclusive',
      needsApproval: true,
      execute: ({ n }) => (charges.push(String(n)), `charged ${n}`),
    });
    const payer = defineAgent({
      name: 'payer',
      instructions: 'pay',
      model: scriptedModel([{ toolCalls: [{ id: 'k1', name: 'charge', arguments: { n: 4 } }] }, 'charged 4']),
      tools: [charge],
    });
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'payer', arguments: { input: 'pay' } }] }, 'Paid.']),
      tools: [agentTool(payer)],
    });
    cleanups.push(() => runtime.close());
    const worker = runtime.serve({ pollMs: 50 });
    cleanups.push(() => worker.stop());
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'pay' });
    const suspended = await runtime.waitForResult('s', 'r', { signal: AbortSignal.timeout(60_000) });
    expect(suspended).toMatchObject({ status: 'suspended', pendingRequest: { questionId: 'approval-k1', path: ['s/r/1/c1'] } });
    await runtime.submit('s', { kind: 'respond', entryId: 'e1', questionId: 'approval-k1', answer: { decisions: { k1: 'approve' } } });
    await until(async () => (await runtime.waitForResult('s', 'r')).status !== 'suspended', 30_000, 'the parent to go on');
    expect(await runtime.waitForResult('s', 'r')).toMatchObject({ status: 'succeeded', finalMessage: 'Paid.' });
    expect(charges).toEqual(['4']);
  }, 60_000);
});

describe('a child session is fenced with its parent', () => {
  it("a child whose parent's worker lost its lease starts no model call and commits nothing more under that writer", async () => {
    const store = memoryStore();
    let skew = 0;
    // the worker's clock: moved past the lease while the child's tool runs (a worker paused that long)
    const clock = { now: () => Date.now() + skew, setTimeout: (fn: () => void, ms: number) => setTimeout(fn, ms), clearTimeout };
    const charges: string[] = [];
    const charge = defineTool({
      name: 'charge',
      description: 'charges',
      parameters: z.object({ n: z.number() }),
      mode: 'exclusive',
      execute: ({ n }, ctx) => {
        charges.push(`${n}@${ctx.sessionId}`);
        if (n === 1) skew = 60_000;
        return `charged ${n}`;
      },
    });
    const scripted = scriptedModel([
      { toolCalls: [{ id: 'k1', name: 'charge', arguments: { n: 1 } }] },
      { toolCalls: [{ id: 'k2', name: 'charge', arguments: { n: 2 } }] },
      'charged twice',
    ]);
    // which claim of the parent each child model call was made under (1: the worker's first)
    let claims = 0;
    const callsUnder: number[] = [];
    const childModel: ModelProvider = { ...scripted, call: (req, onEvent) => (callsUnder.push(claims), scripted.call(req, onEvent)) };
    const payer = defineAgent({ name: 'payer', instructions: 'pay', model: childModel, tools: [charge] });
    const runtime = createRuntime({
      store,
      clock,
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'payer', arguments: { input: 'pay' } }] }, 'paid']),
      tools: [agentTool(payer)],
    });
    cleanups.push(() => runtime.close());
    const worker = runtime.serve({ leaseMs: 5_000, pollMs: 50 });
    const lost: string[] = [];
    worker.events$.subscribe((e) => {
      if (e.type === 'lease_lost') lost.push(e.sessionId);
      if (e.type === 'claimed' && e.sessionId === 's') claims++;
    });
    cleanups.push(() => worker.stop());
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'pay' });
    const childId = 's/r/1/c1';
    await until(() => lost.includes('s'), 30_000, 'the parent lease to be lost');
    await sleep(300); // anything the child's writer would still do, it does now
    const log = await logOf(store, childId);
    const firstEpoch = log[0]!.writerEpoch;
    const k1 = log.find((e) => e.type === 'tool/call' && e.payload.callId === 'k1')!;
    expect(k1.writerEpoch).toBe(firstEpoch);
    // after its charge, the writer whose parent lost its lease committed nothing and called no model
    const after = log.filter((e) => e.seq > k1.seq && e.writerEpoch === firstEpoch);
    expect(after.map((e) => e.type)).toEqual([]);
    expect(charges.filter((c) => c.startsWith('2@'))).toEqual([]);
    expect(callsUnder.filter((n) => n === 1)).toHaveLength(1);
  }, 60_000);
});
