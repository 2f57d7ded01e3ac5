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
  type EventRecord,
  type EventStore,
  type ScriptedStep,
} from '../../src/index.js';
import { chargeTool } from '../helpers/agent-tree.js';
import { deferred } from '../helpers/drafts.js';
import { holdingAppendOf, logOf, ofCall, sleep, storeWithAppend, typesOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// A run that ends cancelled cancels the open runs of its agent calls' children (suspended, detached,
// interrupted), down the tree, by an attempt of each that starts cancelled (nothing of the child
// runs) — before its own end is committed, so that a crash in between redoes it; a call its cancel
// kept from its child is answered `cancelled` with the child's spending (src/runtime/child-cancel.ts).

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const CHILD = 's/r/1/c1';
const GRANDCHILD = `${CHILD}/answer/1/m1`;
const endsOf = (log: EventRecord[]) => log.filter((e) => e.type === 'run/end').map((e) => e.payload.status);
const call = (id: string, name: string): ScriptedStep => ({ toolCalls: [{ id, name, arguments: { input: 'pay' } }] });

/**
 * A parent calling a payer agent whose charge needs approval (or, `levels: 2`, a manager agent
 * calling the payer): the parent suspends on the payer's request.
 */
function payerTree(store: EventStore, ran: string[], o: { levels?: 1 | 2 } = {}) {
  const payerModel = scriptedModel([{ toolCalls: [{ id: 'k1', name: 'charge', arguments: { amount: 1 } }] }, 'paid']);
  const payer = defineAgent({ name: 'payer', instructions: 'p', model: payerModel, tools: [chargeTool(ran)] });
  const manager = defineAgent({
    name: 'manager',
    instructions: 'm',
    model: scriptedModel([call('m1', 'payer')]),
    tools: [agentTool(payer)],
  });
  const top = o.levels === 2 ? manager : payer;
  const runtime = createRuntime({ store, model: scriptedModel([call('c1', top.name), 'never asked']), tools: [agentTool(top)] });
  cleanups.push(() => runtime.close());
  return { runtime, payerModel };
}

/** Submits a cancel entry and waits until the session's inbox has applied it. */
async function cancelThroughInbox(
  runtime: { submit: (id: string, e: { kind: 'cancel'; entryId: string }) => Promise<unknown> },
  store: EventStore,
  entryId: string,
) {
  await runtime.submit('s', { kind: 'cancel', entryId });
  for (let i = 0; i < 500 && !(await store.work!.getEntry('s', entryId))?.applied; i++) await sleep(10);
  return (await store.work!.getEntry('s', entryId))?.applied?.outcome;
}

/** The parent's and child's logs show one cancel that reached the child: nothing of the child ran again, the call answered once. */
async function expectChildCancelled(store: EventStore, childId: string, ran: string[]) {
  const child = await logOf(store, childId);
  expect(endsOf(child)).toEqual(['suspended', 'cancelled']);
  // the child's cancel attempt runs nothing: no model call, no tool, its charge answered skipped
  expect(typesOf(child).filter((t) => t === 'assistant/message')).toHaveLength(1);
  expect(child.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt', 'continue']);
  expect(ran).toEqual([]);
  const parent = await logOf(store, 's');
  const results = ofCall(parent, 'tool/result', 'c1');
  expect(results).toHaveLength(1);
  return { parent, child, outcome: results[0]!.payload.outcome as Record<string, unknown> };
}

describe("a cancelled run's children are cancelled with it", () => {
  it("a cancel through the inbox of a parent suspended on its child's request ends the child's run cancelled and answers the call cancelled with the child's spending", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const { runtime, payerModel } = payerTree(store, ran);
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' })).status).toBe('suspended');
    expect(await cancelThroughInbox(runtime, store, 'x')).toMatchObject({ status: 'applied', reason: 'run r cancelled' });
    const { parent, outcome } = await expectChildCancelled(store, CHILD, ran);
    expect(payerModel.requests).toHaveLength(1);
    expect(endsOf(parent)).toEqual(['suspended', 'cancelled']);
    expect(outcome).toMatchObject({
      kind: 'cancelled',
      partialContent: expect.stringContaining(`the run of its child session ${CHILD} was cancelled with it`),
      usage: { outputTokens: 1 },
    });
    // the parent's result counts its own model call and the child's, once
    const r = await runtime.waitForResult('s', 'r', { signal: AbortSignal.timeout(5000), pollMs: 10 });
    expect(r).toMatchObject({ status: 'cancelled', usage: { outputTokens: 2 } });
    expect(s.pendingRequest).toBeUndefined();
    // neither session has anything open or waiting: the parent reopened, the child (its parent call's) read from its log
    const reopened = await payerTree(store, []).runtime.openSession('s', { resume: 'manual' });
    expect(reopened.recovery.interruptedRuns).toEqual([]);
    expect(reopened.pendingRequest).toBeUndefined();
    expect(await store.getHead(CHILD)).toMatchObject({ openRun: null });
  });

  it("a cancel through the inbox of a detached parent ends its detached child's run cancelled: nothing of the child runs again", async () => {
    const store = memoryStore();
    const started = deferred();
    const release = deferred();
    const slow = defineTool({
      name: 'slow',
      description: 'slow lookup',
      parameters: z.object({}),
      mode: 'parallel',
      execute: async () => (started.resolve(), await release.promise, 'looked up'),
    });
    const childModel = scriptedModel([{ toolCalls: [{ id: 'l1', name: 'slow', arguments: {} }] }, 'never asked']);
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel, tools: [slow] });
    const runtime = createRuntime({
      store,
      model: scriptedModel([call('c1', 'researcher'), 'never asked']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await started.promise;
    expect(s.requestDetach()).toBe(true);
    release.resolve();
    expect((await running).status).toBe('detached');
    expect(await cancelThroughInbox(runtime, store, 'x')).toMatchObject({ reason: 'run r cancelled' });
    const child = await logOf(store, CHILD);
    expect(endsOf(child)).toEqual(['detached', 'cancelled']);
    expect(childModel.requests).toHaveLength(1);
    expect(endsOf(await logOf(store, 's'))).toEqual(['detached', 'cancelled']);
    expect(ofCall(await logOf(store, 's'), 'tool/result', 'c1').map((e) => e.payload.outcome)).toMatchObject([
      { kind: 'cancelled', partialContent: expect.stringContaining(`${CHILD} was cancelled with it`), usage: { outputTokens: 1 } },
    ]);
  });

  it("a parent's cancel reaches a grandchild: the child's and the grandchild's runs end cancelled, each answered cancelled up the tree", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const { runtime } = payerTree(store, ran, { levels: 2 });
    const s = await runtime.openSession('s');
    const suspended = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    expect(suspended.pendingRequest?.path).toEqual([CHILD, GRANDCHILD]);
    expect(await cancelThroughInbox(runtime, store, 'x')).toMatchObject({ reason: 'run r cancelled' });
    await expectChildCancelled(store, GRANDCHILD, ran);
    const child = await logOf(store, CHILD);
    expect(endsOf(child)).toEqual(['suspended', 'cancelled']);
    expect(ofCall(child, 'tool/result', 'm1').map((e) => e.payload.outcome)).toMatchObject([
      { kind: 'cancelled', partialContent: expect.stringContaining(`${GRANDCHILD} was cancelled with it`) },
    ]);
    expect(endsOf(await logOf(store, 's'))).toEqual(['suspended', 'cancelled']);
  });

  it("an agent call recovered by an attempt that starts cancelled is answered cancelled, not skipped, and its child's open run is cancelled", async () => {
    const base = memoryStore();
    const ran: string[] = [];
    // life 1: the parent's results commit (its child's request) never lands: the process stops there
    const { store, landing } = holdingAppendOf(base, 'approval/requested', 's');
    const first = payerTree(store, ran);
    void (await first.runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await landing.promise;
    expect(endsOf(await logOf(base, CHILD))).toEqual(['suspended']);
    // life 2: the parent's interrupted run is continued by an attempt cancelled before it resumes the call
    const { runtime } = payerTree(base, ran);
    const s = await runtime.openSession('s', { resume: 'manual' });
    const cont = s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(await s.requestCancel('user')).toBe(true);
    expect((await cont).status).toBe('cancelled');
    const { outcome } = await expectChildCancelled(base, CHILD, ran);
    expect(outcome).toMatchObject({ kind: 'cancelled', usage: { outputTokens: 1 } });
    expect(outcome.partialContent).toContain(`${CHILD} was cancelled with it`);
  });
});

describe('the kill switch', () => {
  it("a parent cancelled by the kill switch leaves its waiting child's run open (no attempt starts while it is set) and its answer says so", async () => {
    const store = memoryStore();
    const ran: string[] = [];
    const kill = new AbortController();
    const started = deferred();
    const slow = defineTool({
      name: 'slow',
      description: 'slow',
      parameters: z.object({}),
      mode: 'parallel',
      execute: (_a, ctx) =>
        new Promise<string>((resolve) => (started.resolve(), ctx.signal.addEventListener('abort', () => resolve('stopped')))),
    });
    const charge = defineTool({
      name: 'charge',
      description: 'charges',
      parameters: z.object({}),
      needsApproval: true,
      execute: () => (ran.push('charge'), 'charged'),
    });
    const payer = defineAgent({
      name: 'payer',
      instructions: 'p',
      model: scriptedModel([{ toolCalls: [{ id: 'k1', name: 'charge', arguments: {} }] }]),
      tools: [charge],
    });
    const runtime = createRuntime({
      store,
      model: scriptedModel([
        {
          toolCalls: [
            { id: 'c1', name: 'payer', arguments: { input: 'pay' } },
            { id: 'c2', name: 'slow', arguments: {} },
          ],
        },
      ]),
      tools: [agentTool(payer, { mode: 'parallel' }), slow],
      killSwitch: kill.signal,
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await started.promise;
    for (let i = 0; i < 200 && !endsOf(await logOf(store, CHILD)).includes('suspended'); i++) await sleep(10);
    kill.abort();
    expect((await running).status).toBe('cancelled');
    expect(endsOf(await logOf(store, CHILD))).toEqual(['suspended']);
    expect(ofCall(await logOf(store, 's'), 'tool/result', 'c1').map((e) => e.payload.outcome)).toMatchObject([
      { kind: 'cancelled', partialContent: expect.stringContaining(`${CHILD} stays open (the kill switch is set`) },
    ]);
    expect(ran).toEqual([]);
  });
});

describe('the cascade across a crash and a takeover', () => {
  it("a crash after the child was cancelled and before the parent's run/end: the cancel applied again ends the parent's run, and the child's run ends once", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const ran: string[] = [];
    const stopped = deferred();
    // life 1: the parent's cancelled run/end never lands (the process stops there)
    const inner = lmdbStore({ path: dir.path });
    const hanging = storeWithAppend(inner, (id, epoch, seq, drafts) =>
      id === 's' && drafts.some((d) => d.type === 'run/end' && d.payload.status === 'cancelled')
        ? (stopped.resolve(), new Promise(() => {}))
        : inner.append(id, epoch, seq, drafts),
    );
    const first = payerTree(Object.assign(hanging, { work: inner.work }), ran);
    const s1 = await first.runtime.openSession('s');
    expect((await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' })).status).toBe('suspended');
    await first.runtime.submit('s', { kind: 'cancel', entryId: 'x' });
    await stopped.promise;
    // the children are cancelled before the parent's end is committed
    expect(endsOf(await logOf(inner, CHILD))).toEqual(['suspended', 'cancelled']);
    expect(endsOf(await logOf(inner, 's'))).toEqual(['suspended']);
    // life 2: the entry, not recorded applied, is applied again
    const store = lmdbStore({ path: dir.path });
    const { runtime } = payerTree(store, ran);
    await runtime.openSession('s');
    expect(await cancelThroughInbox(runtime, store, 'x')).toMatchObject({ reason: 'run r cancelled' });
    const { parent, outcome } = await expectChildCancelled(store, CHILD, ran);
    expect(endsOf(parent)).toEqual(['suspended', 'cancelled']);
    // the interrupted cancel attempt is not run again: a new one ends the run
    expect(parent.filter((e) => e.type === 'run/start').map((e) => e.payload.attemptId)).toEqual(['r', 'x', 'x~2']);
    expect(outcome).toMatchObject({ kind: 'cancelled', usage: { outputTokens: 1 } });
    expect(outcome.partialContent).toContain(`${CHILD} had ended cancelled`);
  });

  it("a parent's cancel recorded before a crash stands: its continue ends the run cancelled and cancels its running child's interrupted run, starting nothing again in either", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const ran: string[] = [];
    const charging = deferred();
    // the child's charge ignores its signal; the grace outlasts life 1, which stops with both runs open
    const tree = (charge: () => Promise<string> | string) => {
      const payer = defineAgent({
        name: 'payer',
        instructions: 'p',
        model: scriptedModel([{ toolCalls: [{ id: 'k1', name: 'charge', arguments: {} }] }, 'paid']),
        tools: [defineTool({ name: 'charge', description: '', parameters: z.object({}), execute: charge })],
      });
      const runtime = createRuntime({
        store: lmdbStore({ path: dir.path }),
        model: scriptedModel([call('c1', 'payer'), 'never asked']),
        tools: [agentTool(payer)],
        config: { cancelGraceMs: 60_000 },
      });
      cleanups.push(() => runtime.close());
      return runtime;
    };
    const first = tree(() => (ran.push('charge'), charging.resolve(), new Promise<string>(() => {})));
    void (await first.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await charging.promise;
    expect(await (await first.openSession('s')).requestCancel('stop paying')).toBe(true);
    // the cancel reached the child, which records its own before its charge would stop
    for (let i = 0; i < 500 && !typesOf(await logOf(first.store, CHILD)).includes('cancellation/requested'); i++) await sleep(10);
    expect((await logOf(first.store, CHILD)).filter((e) => e.type === 'cancellation/requested').map((e) => e.attempt)).toEqual([1]);

    const runtime = tree(() => (ran.push('charge again'), 'charged'));
    const s = await runtime.openSession('s', { resume: 'manual' });
    expect(s.recovery.interruptedRuns).toMatchObject([{ runId: 'r', cancelRequested: { reason: 'stop paying' } }]);
    expect(await s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({ status: 'cancelled' });
    const child = await logOf(runtime.store, CHILD);
    expect(endsOf(child)).toEqual(['cancelled']);
    expect(child.filter((e) => e.type === 'assistant/message')).toHaveLength(1);
    // the charge may have run (it had started): recorded uncertain, never run again
    expect(ofCall(child, 'tool/result', 'k1').map((e) => e.payload.outcome)).toMatchObject([{ kind: 'uncertain-hanging' }]);
    expect(ran).toEqual(['charge']);
    const parent = await logOf(runtime.store, 's');
    expect(endsOf(parent)).toEqual(['cancelled']);
    expect(parent.filter((e) => e.type === 'assistant/message')).toHaveLength(1);
    expect(ofCall(parent, 'tool/result', 'c1').map((e) => e.payload.outcome)).toMatchObject([
      { kind: 'cancelled', partialContent: expect.stringContaining(CHILD) },
    ]);
  });

  it("a parent writer fenced before its cancel reaches the children touches none of them: the child's run stays suspended for the new writer", async () => {
    const base = memoryStore();
    const ran: string[] = [];
    let armed = false;
    // another writer takes the parent over as the cancel reads its child's head
    const store: EventStore = {
      ...storeWithAppend(base, (...a) => base.append(...a)),
      work: base.work!,
      getHead: async (id) => {
        if (armed && id === CHILD) {
          armed = false;
          await base.attachWriter('s');
        }
        return base.getHead(id);
      },
    };
    const { runtime } = payerTree(store, ran);
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' })).status).toBe('suspended');
    const childEpoch = (await base.getHead(CHILD))?.writerEpoch;
    armed = true;
    await runtime.submit('s', { kind: 'cancel', entryId: 'x' });
    for (let i = 0; i < 200 && armed; i++) await sleep(10);
    expect(armed).toBe(false);
    await s.waitForIdle();
    // not even opened: its writer was not taken over (which would fence a writer the new parent gave it)
    expect((await base.getHead(CHILD))?.writerEpoch).toBe(childEpoch);
    const child = await logOf(base, CHILD);
    expect(endsOf(child)).toEqual(['suspended']);
    expect(typesOf(child).filter((t) => t === 'session/attached')).toHaveLength(1);
    expect(endsOf(await logOf(base, 's'))).toEqual(['suspended']);
  });

  /**
   * Life 1 on `dir` pauses as its child's run/start goes to the store (the child session attached);
   * `afterFirstRead` runs as another writer's cancel of the parent has read the child's head and
   * is about to attach it. Returns life 1's paused append and the cancelling runtime.
   */
  async function pausedOpener(dir: string, ran: string[], afterFirstRead: (paused: { release: { resolve(): void } }) => Promise<void>) {
    const tree = (store: EventStore) => {
      const payer = defineAgent({ name: 'payer', instructions: 'p', model: scriptedModel(['paid']), tools: [chargeTool(ran)] });
      const runtime = createRuntime({ store, model: scriptedModel([call('c1', 'payer'), 'never asked']), tools: [agentTool(payer)] });
      cleanups.push(() => runtime.close());
      return runtime;
    };
    const paused = holdingAppendOf(lmdbStore({ path: dir }), 'run/start', CHILD);
    const first = tree(paused.store);
    const running = (await first.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await paused.landing.promise;
    expect(typesOf(await logOf(first.store, CHILD))).toEqual(['session/attached']);
    const inner = lmdbStore({ path: dir });
    let armed = true;
    const store: EventStore = {
      ...storeWithAppend(inner, (...a) => inner.append(...a)),
      attachWriter: async (id, ...rest) => {
        if (armed && id === CHILD) {
          armed = false;
          await afterFirstRead(paused);
        }
        return inner.attachWriter(id, ...rest);
      },
    };
    // another writer takes the parent over and cancels its run
    const runtime = tree(store);
    const s = await runtime.openSession('s', { resume: 'manual' });
    const cancelled = s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    await s.requestCancel('stop');
    expect(await cancelled).toMatchObject({ status: 'cancelled' });
    return { runtime, running, paused, answer: ofCall(await logOf(runtime.store, 's'), 'tool/result', 'c1').map((e) => e.payload.outcome) };
  }

  it('a child a paused writer opened, its run/start still in flight, is fenced by the parent\'s cancel: the answer\'s "never started" stands, the late append is refused', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const ran: string[] = [];
    const { runtime, running, paused, answer } = await pausedOpener(dir.path, ran, async () => {});
    expect(answer).toMatchObject([
      { kind: 'cancelled', partialContent: expect.stringContaining(`its child session ${CHILD} never started its run`) },
    ]);
    // life 1 wakes: its child's run/start is refused, so the answer stays true
    paused.release.resolve();
    await running.catch(() => undefined);
    const child = await logOf(runtime.store, CHILD);
    expect(typesOf(child)).toEqual(['session/attached', 'session/attached']);
    expect((await runtime.store.getHead(CHILD))?.openRun).toBeNull();
    expect(ran).toEqual([]);
  });

  it('a child whose paused opener woke and ran it to its end before the cancel attached it is answered as it ended, with its spending: never "never started"', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const ran: string[] = [];
    const { answer } = await pausedOpener(dir.path, ran, async (paused) => {
      paused.release.resolve();
      const inner = lmdbStore({ path: dir.path });
      for (let i = 0; i < 500 && !typesOf(await logOf(inner, CHILD)).includes('run/end'); i++) await sleep(10);
      await inner.close();
    });
    expect(answer).toMatchObject([
      {
        kind: 'cancelled',
        partialContent: expect.stringContaining(`the run of its child session ${CHILD} had ended succeeded`),
        usage: expect.objectContaining({ outputTokens: expect.any(Number) }),
      },
    ]);
  });
});
