import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  agentTool,
  createRuntime,
  defineAgent,
  defineTool,
  memoryStore,
  scriptedModel,
  type EventRecord,
  type EventStore,
  type ToolVerifier,
} from '../../src/index.js';
import type { InspectionEvent } from 'xstate';
import { chargeTool } from '../helpers/agent-tree.js';
import { deferred } from '../helpers/drafts.js';
import { holdingAppendOf, logOf, ofCall, sleep, typesOf } from '../helpers/runtime.js';

// A cancel of a parent run settles it `cancelled` whatever its agent calls' children are doing:
// a child that runs is cancelled with it, a call whose child waits for an answer (or was detached)
// is answered `cancelled` naming that child, and no request of a child is left for the parent to
// wait on — whenever in the step the cancel comes.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const CHILD = 's/r/1/c1';
const kindsOf = (records: EventRecord[]) => records.map((e) => (e.payload.outcome as { kind: string }).kind);

async function until(pred: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500 && !(await pred()); i++) await sleep(10);
}

const lookup = defineTool({
  name: 'lookup',
  description: 'looks up',
  parameters: z.object({}),
  mode: 'parallel',
  execute: () => 'found it',
});

/**
 * A parent whose one step calls a payer agent (its child's charge waits for approval: the call is
 * left unsettled) beside a `lookup` that completes.
 */
function waitingChildTree(store: EventStore, ran: string[], o: { verifier?: ToolVerifier; inspect?: (e: InspectionEvent) => void } = {}) {
  const payer = defineAgent({
    name: 'payer',
    instructions: 'p',
    model: scriptedModel([{ toolCalls: [{ id: 'k1', name: 'charge', arguments: { amount: 1 } }] }]),
    tools: [chargeTool(ran)],
  });
  const model = scriptedModel([
    {
      toolCalls: [
        { id: 'c1', name: 'payer', arguments: { input: 'pay' } },
        { id: 'c2', name: 'lookup', arguments: {} },
      ],
    },
    'never asked',
  ]);
  const runtime = createRuntime({
    store,
    model,
    tools: [agentTool(payer, { mode: 'parallel' }), lookup],
    ...o,
  });
  cleanups.push(() => runtime.close());
  return runtime;
}

/**
 * What the cancelled parent's log and a reopen of it (recovery, in a new runtime) say: the run
 * ended `cancelled` with the waiting child's call answered `cancelled`, once, and nothing waits.
 */
async function expectSettledCancelled(store: EventStore, ran: string[]) {
  const log = await logOf(store, 's');
  expect(log.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['cancelled']);
  expect(kindsOf(ofCall(log, 'tool/result', 'c1'))).toEqual(['cancelled']);
  expect(kindsOf(ofCall(log, 'tool/result', 'c2'))).toEqual(['completed']);
  expect(log.filter((e) => e.type === 'step/end' && e.step === 1)).toHaveLength(1);
  expect(ran).toEqual([]);
  const reopened = createRuntime({ store, model: scriptedModel([]) });
  cleanups.push(() => reopened.close());
  const s = await reopened.openSession('s', { resume: 'manual' });
  expect(s.recovery.interruptedRuns).toEqual([]);
  expect(s.pendingRequest).toBeUndefined();
  // the attempt executed again returns what its run/end recorded
  expect((await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' })).status).toBe('cancelled');
  return log;
}

describe('a cancelled parent settles the calls of its waiting children', () => {
  it("a cancel of the parent while one child waits for an answer and another runs: the run ends cancelled and the waiting child's call is answered cancelled", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: 'slow',
      parameters: z.object({}),
      mode: 'parallel',
      execute: async (_a, ctx) => {
        started.resolve();
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
        return 'stopped';
      },
    });
    const payer = defineAgent({
      name: 'payer',
      instructions: 'p',
      model: scriptedModel([{ toolCalls: [{ id: 'k1', name: 'charge', arguments: { amount: 1 } }] }]),
      tools: [chargeTool(ran)],
    });
    const researcher = defineAgent({
      name: 'researcher',
      instructions: 'r',
      model: scriptedModel([{ toolCalls: [{ id: 'l1', name: 'slow', arguments: {} }] }]),
      tools: [slow],
    });
    const runtime = createRuntime({
      store,
      model: scriptedModel([
        {
          toolCalls: [
            { id: 'c1', name: 'payer', arguments: { input: 'pay' } },
            { id: 'c2', name: 'researcher', arguments: { input: 'look' } },
          ],
        },
      ]),
      tools: [agentTool(payer, { mode: 'parallel' }), agentTool(researcher, { mode: 'parallel' })],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await started.promise;
    // the payer's child is suspended by now (its charge waits for approval)
    await until(async () => (await logOf(store, CHILD)).some((e) => e.type === 'run/end' && e.payload.status === 'suspended'));
    await s.requestCancel('user');
    const r = await running;
    expect(r.status).toBe('cancelled');
    expect(r.pendingRequest).toBeUndefined();
    const log = await logOf(store, 's');
    expect(kindsOf(ofCall(log, 'tool/result', 'c1'))).toEqual(['cancelled']);
    expect(kindsOf(ofCall(log, 'tool/result', 'c2'))).toEqual(['cancelled']);
    expect(ran).toEqual([]);
    // the waiting child's run is cancelled with its parent, as the running one is
    expect((await logOf(store, CHILD)).filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual([
      'suspended',
      'cancelled',
    ]);
  });

  it("a cancel arriving while a step's results commit ends the run cancelled, not suspended: the waiting child's run is cancelled with it, its call answered cancelled with the child's spending, its request never committed, and a reopen reports the same", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const verifying = deferred();
    const release = deferred();
    // the verifier of the lookup's result holds the step's results commit until the cancel is in
    const runtime = waitingChildTree(store, ran, {
      verifier: async (name) => {
        if (name !== 'lookup') return undefined;
        verifying.resolve();
        await release.promise;
        return undefined;
      },
    });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await verifying.promise;
    expect(await s.requestCancel('user')).toBe(true);
    release.resolve();
    const r = await running;
    expect(r).toMatchObject({ status: 'cancelled', outcome: 'cancelled' });
    expect(r.pendingRequest).toBeUndefined();
    expect(s.pendingRequest).toBeUndefined();
    const log = await expectSettledCancelled(store, ran);
    expect(typesOf(log).filter((t) => t === 'approval/requested' || t === 'run/suspended')).toEqual([]);
    expect(ofCall(log, 'tool/result', 'c1')[0]!.payload.outcome).toMatchObject({
      settled: true,
      partialContent: expect.stringContaining(`the run of its child session ${CHILD} was cancelled with it`),
      usage: { outputTokens: 1 },
    });
    // the cancel reaches the waiting child: its run ends cancelled by an attempt that runs nothing
    const child = await logOf(store, CHILD);
    expect(child.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['suspended', 'cancelled']);
    expect(typesOf(child).filter((t) => t === 'assistant/message')).toHaveLength(1);
    // the parent counts the child's spending once: its own model call and the child's
    expect(r.usage.outputTokens).toBe(2);
  });

  it("a cancel arriving while a step's results land ends the run cancelled, not suspended, though the child's request was committed with them", async () => {
    const base = memoryStore();
    const ran: string[] = [];
    // the parent's results append (the one holding the lookup's result) waits until released
    const { store, release } = holdingAppendOf(base, 'tool/result', 's');
    // the parent's run has decided to wait on the child's request and waits for its results to land
    const settling = deferred();
    const runtime = waitingChildTree(store, ran, {
      inspect: (e) => {
        const snap = e.type === '@xstate.snapshot' ? (e.snapshot as { value?: unknown; context?: { runId?: string } }) : undefined;
        if (snap?.value === 'settlingResults' && snap.context?.runId === 'r') settling.resolve();
      },
    });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await settling.promise;
    const cancelled = s.requestCancel('user'); // its record's append waits behind the results'
    release.resolve();
    expect(await cancelled).toBe(true);
    const r = await running;
    expect(r).toMatchObject({ status: 'cancelled', outcome: 'cancelled' });
    expect(r.pendingRequest).toBeUndefined();
    expect(s.pendingRequest).toBeUndefined();
    const log = await expectSettledCancelled(base, ran);
    // the request committed with the results is followed by the call's cancelled answer and the run's end
    const types = typesOf(log);
    expect(types.slice(types.indexOf('approval/requested'))).toEqual([
      'approval/requested',
      'run/suspended',
      'cancellation/requested',
      'tool/result',
      'step/end',
      'run/end',
    ]);
  });
});
