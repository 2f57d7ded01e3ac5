import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel, type EventStore, type Runtime } from '../../src/index.js';
import { isCancelledError, isInputRejectedError, isValidationError, type ValidationError } from '../../src/contracts/errors.js';
import { StoreUnavailableError } from '../../src/contracts/store-errors.js';
import { toolLoopModel } from '../helpers/serve-model.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { localStores } from '../helpers/backends.js';
import { tempDir } from '../helpers/tmp.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';

// The inbox: runtime.submit records an entry without becoming the session's writer; the owner
// (this runtime when it has the session open, or a serving worker) applies it exactly once.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const backends = localStores(cleanups);
const db = await postgresForTests('inbox (postgres)');
if (db) backends.push(['postgres', () => postgresStore({ connectionString: db.url, schema: freshSchema('inbox') })]);

const echo = defineTool({
  name: 'echo',
  description: '',
  parameters: z.object({ key: z.string() }),
  mode: 'parallel',
  execute: ({ key }) => `echo ${key}`,
});

/** A payment that needs approval, and the amounts it paid. */
function payTool() {
  const paid: number[] = [];
  const pay = defineTool({
    name: 'pay',
    description: '',
    parameters: z.object({ amount: z.number() }),
    needsApproval: true,
    execute: ({ amount }) => (paid.push(amount), `paid ${amount}`),
  });
  return { paid, pay };
}

function make(store: EventStore, options: Partial<Parameters<typeof createRuntime>[0]> = {}): Runtime {
  const runtime = createRuntime({ store, model: toolLoopModel({ steps: 1, toolsPerStep: 2, tools: ['echo'] }), tools: [echo], ...options });
  cleanups.push(() => runtime.close());
  return runtime;
}

describe.each(backends)('inbox (%s)', (_name, makeStore) => {
  it('submit is durable and idempotent by id, and never attaches a writer', async () => {
    const store = makeStore();
    const runtime = make(store);
    const entry = { kind: 'input' as const, inputId: 'i1', mode: 'follow_up' as const, message: 'hello' };
    expect(await runtime.submit('s1', entry)).toEqual({ sessionId: 's1', entryId: 'i1', kind: 'input', status: 'accepted' });
    expect(await runtime.submit('s1', entry)).toMatchObject({ status: 'already_accepted' });
    const other = await runtime.submit('s1', { ...entry, message: 'something else' });
    expect(other.status).toBe('refused');
    expect(other.reason).toMatch(/already used/);
    expect(await store.getHead('s1')).toBeUndefined(); // no writer, no log
    const pending = await store.work!.pending('s1');
    expect(pending.map((p) => [p.entryId, p.seq])).toEqual([['i1', 1]]);
  });

  it('bad entries are ValidationErrors and store nothing', async () => {
    const store = makeStore();
    const runtime = make(store);
    await expect(runtime.submit('s1', { kind: 'input', inputId: '', mode: 'follow_up', message: 'x' } as never)).rejects.toSatisfy(
      isValidationError,
    );
    await expect(runtime.submit('s1', { kind: 'launch', entryId: 'x' } as never)).rejects.toSatisfy(isValidationError);
    await expect(runtime.submit('', { kind: 'cancel', entryId: 'c' })).rejects.toSatisfy(isValidationError);
    expect(await store.work!.pending('s1')).toEqual([]);
  });

  it('submit refuses an input whose inputId names a run of the session (ValidationError, nothing stored); the same input again, its run started, stays already_accepted', async () => {
    const store = makeStore();
    const runtime = make(store);
    const session = await runtime.openSession('s1');
    await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'first' });
    for (const mode of ['follow_up', 'steer'] as const) {
      const err = await runtime.submit('s1', { kind: 'input', inputId: 'r1', mode, message: 'again' }).catch((e: unknown) => e);
      expect(isValidationError(err), String(err)).toBe(true);
      expect((err as ValidationError).issues[0]).toMatchObject({
        path: ['inputId'],
        message: expect.stringMatching(/run r1 already exists/),
      });
    }
    expect(await store.work!.getEntry('s1', 'r1')).toBeUndefined();
    // an input applied (run i2 now exists because of it), submitted again — also while it is being applied
    const entry = { kind: 'input' as const, inputId: 'i2', mode: 'follow_up' as const, message: 'second' };
    const receipts = await Promise.all(Array.from({ length: 8 }, (_, i) => sleep(i * 3).then(() => runtime.submit('s1', entry))));
    expect(receipts.map((r) => r.status).sort()).toEqual(['accepted', ...Array(7).fill('already_accepted')]);
    expect(await runtime.waitForResult('s1', 'i2', { signal: AbortSignal.timeout(20_000) })).toMatchObject({
      runId: 'i2',
      status: 'succeeded',
    });
    expect(await runtime.submit('s1', entry)).toMatchObject({ status: 'already_accepted' });
    expect(await runtime.submit('s1', { ...entry, message: 'other' })).toMatchObject({ status: 'refused' }); // its id, another entry
    // an input the session accepted in-process: its run exists, the same input through the inbox is already accepted
    await session.submitInput({ inputId: 'i3', mode: 'follow_up', message: 'third' });
    await session.waitForIdle();
    expect(await runtime.submit('s1', { kind: 'input', inputId: 'i3', mode: 'follow_up', message: 'third' })).toMatchObject({
      status: 'already_accepted',
    });
    const log = await logOf(store, 's1');
    expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.runId)).toEqual(['r1', 'i2', 'i3']);
  });

  it('submit refuses an entry whose run ids would not fit the store with the session id (ValidationError, nothing stored)', async () => {
    const store = makeStore();
    const runtime = make(store);
    const sessionId = '中'.repeat(400); // 1,200 bytes in UTF-8
    const long = '中'.repeat(200);
    for (const entry of [
      { kind: 'input' as const, inputId: long, mode: 'follow_up' as const, message: 'hello' },
      { kind: 'respond' as const, entryId: long, runId: '中'.repeat(50), questionId: 'q', answer: {} },
    ]) {
      const err = await runtime.submit(sessionId, entry).catch((e: unknown) => e);
      expect(isValidationError(err), String(err)).toBe(true);
      expect((err as ValidationError).message).toMatch(/too long/);
    }
    expect(await store.work!.pending(sessionId)).toEqual([]);
  });

  it("waitForResult of an input its owner rejected rejects with InputRejectedError naming the reason: never another run's result, never a hang", async () => {
    const store = makeStore();
    const runtime = make(store);
    const session = await runtime.openSession('s1');
    await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'first' });
    // an entry stored behind submit's checks (as one racing the prompt that took r1 would be)
    await store.work!.submit('s1', { kind: 'input', inputId: 'r1', mode: 'follow_up', message: 'again' });
    // not applied yet: run r1's result is not this input's
    await expect(runtime.waitForResult('s1', 'r1', { signal: AbortSignal.timeout(300), pollMs: 20 })).rejects.toSatisfy(isCancelledError);
    await runtime.submit('s1', { kind: 'cancel', entryId: 'c1' }); // the open session drains its inbox
    const err = await runtime.waitForResult('s1', 'r1', { signal: AbortSignal.timeout(20_000), pollMs: 20 }).catch((e: unknown) => e);
    expect(isInputRejectedError(err), String(err)).toBe(true);
    expect(err).toMatchObject({ sessionId: 's1', inputId: 'r1', reason: expect.stringMatching(/run r1 already exists/) });
    const log = await logOf(store, 's1');
    expect(log.filter((e) => e.type === 'input/accepted')).toEqual([]);
    expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.runId)).toEqual(['r1']);
  });

  it('a runtime that has the session open applies an input at once: it starts run <inputId>', async () => {
    const store = makeStore();
    const runtime = make(store);
    const session = await runtime.openSession('s1');
    await runtime.submit('s1', { kind: 'input', inputId: 'i1', mode: 'steer', message: 'hello' });
    const result = await runtime.waitForResult('s1', 'i1', { signal: AbortSignal.timeout(20_000) });
    expect(result).toMatchObject({ runId: 'i1', status: 'succeeded', finalMessage: 'done: hello' });
    await session.waitForIdle();
    for (let i = 0; i < 100 && (await store.work!.pending('s1')).length > 0; i++) await sleep(10);
    expect((await store.work!.getEntry('s1', 'i1'))!.applied).toMatchObject({
      writerEpoch: session.recovery.writerEpoch,
      outcome: { status: 'applied' },
    });
    const log = await logOf(store, 's1');
    expect(log.filter((e) => e.type === 'input/accepted').map((e) => e.payload.inputId)).toEqual(['i1']);
    expect(log.filter((e) => e.type === 'session/attached')).toHaveLength(1); // submit attached nothing
  });

  it('a drain that fails is tried again: an entry whose applied mark failed is marked without another submit', async () => {
    const store = makeStore();
    const work = store.work!;
    const mark = work.markApplied.bind(work);
    let failMarks = 1;
    work.markApplied = (...a) =>
      failMarks-- > 0 ? Promise.reject(new StoreUnavailableError('injected: mark lost', 'not_written')) : mark(...a);
    const runtime = make(store);
    await runtime.openSession('s');
    await runtime.submit('s', { kind: 'input', inputId: 'i1', mode: 'follow_up', message: 'hi' });
    for (let i = 0; i < 300 && !(await work.getEntry('s', 'i1'))?.applied; i++) await sleep(10);
    expect((await work.getEntry('s', 'i1'))?.applied?.outcome.status).toBe('applied');
    expect((await runtime.waitForResult('s', 'i1', { signal: AbortSignal.timeout(5000) })).status).toBe('succeeded');
  });

  it('serve runs sessions fed through submit, each input consumed exactly once, and releases them', async () => {
    const store = makeStore();
    const feeder = make(store);
    for (let i = 0; i < 6; i++) {
      for (let k = 0; k < 2; k++)
        await feeder.submit(`s${i}`, { kind: 'input', inputId: `s${i}-in${k}`, mode: 'follow_up', message: `m${i}.${k}` });
    }
    const worker = make(store);
    const seen: string[] = [];
    const handle = worker.serve({ concurrency: 3, leaseMs: 5000, pollMs: 20 });
    handle.subscribe((e) => seen.push(e.type));
    for (let i = 0; i < 6; i++) {
      for (let k = 0; k < 2; k++) {
        const r = await feeder.waitForResult(`s${i}`, `s${i}-in${k}`, { signal: AbortSignal.timeout(30_000), pollMs: 20 });
        expect(r).toMatchObject({ status: 'succeeded', finalMessage: `done: m${i}.${k}` });
      }
    }
    for (let i = 0; i < 200 && handle.sessions.length > 0; i++) await sleep(20);
    expect(handle.sessions).toEqual([]);
    await handle.stop();
    expect(seen).toEqual(expect.arrayContaining(['started', 'claimed', 'attached', 'applied', 'released', 'stopping', 'stopped']));
    for (let i = 0; i < 6; i++) {
      const log = await logOf(store, `s${i}`);
      expect(log.filter((e) => e.type === 'input/accepted').map((e) => e.payload.inputId)).toEqual([`s${i}-in0`, `s${i}-in1`]);
      expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.runId)).toEqual([`s${i}-in0`, `s${i}-in1`]);
    }
    const leases = await store.work!.listLeases();
    expect(leases.filter((l) => l.workerId !== null)).toEqual([]);
    expect(await store.work!.listWorkers()).toEqual([]);
  });

  it('respond through the inbox answers a pending approval; a bad answer is rejected, not lost', async () => {
    const store = makeStore();
    const { paid, pay } = payTool();
    const runtime = make(store, {
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: { amount: 5 } }] }, 'paid']),
      tools: [pay],
    });
    const handle = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => handle.stop());
    await runtime.submit('s', { kind: 'input', inputId: 'r1', mode: 'follow_up', message: 'pay' });
    const suspended = await runtime.waitForResult('s', 'r1', { signal: AbortSignal.timeout(20_000), pollMs: 20 });
    expect(suspended.status).toBe('suspended');
    const q = suspended.pendingRequest!.questionId;
    await runtime.submit('s', { kind: 'respond', entryId: 'ans-bad', questionId: 'not-the-question', answer: {} });
    await runtime.submit('s', { kind: 'respond', entryId: 'ans1', questionId: q, answer: { decisions: { p1: 'approve' } } });
    for (let i = 0; i < 500 && !(await store.work!.getEntry('s', 'ans1'))?.applied; i++) await sleep(20);
    const done = await runtime.waitForResult('s', 'r1', { signal: AbortSignal.timeout(20_000), pollMs: 20 });
    expect(done).toMatchObject({ status: 'succeeded', finalMessage: 'paid' });
    expect(paid).toEqual([5]);
    expect((await store.work!.getEntry('s', 'ans-bad'))!.applied!.outcome.status).toBe('rejected');
    expect((await store.work!.getEntry('s', 'ans1'))!.applied!.outcome.status).toBe('applied');
  });

  it('cancel ends a suspended run by an attempt that starts cancelled: the calls its request held back are answered skipped, nothing runs and nothing waits', async () => {
    const store = makeStore();
    const { paid, pay } = payTool();
    const runtime = make(store, {
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: { amount: 5 } }] }]),
      tools: [pay],
    });
    const handle = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => handle.stop());
    await runtime.submit('s', { kind: 'input', inputId: 'r1', mode: 'follow_up', message: 'pay' });
    expect((await runtime.waitForResult('s', 'r1', { signal: AbortSignal.timeout(20_000), pollMs: 20 })).status).toBe('suspended');
    await runtime.submit('s', { kind: 'cancel', entryId: 'c1' });
    for (let i = 0; i < 500 && !(await store.work!.getEntry('s', 'c1'))?.applied; i++) await sleep(20);
    expect((await store.work!.getEntry('s', 'c1'))!.applied!.outcome).toMatchObject({ status: 'applied', reason: 'run r1 cancelled' });
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['suspended', 'cancelled']);
    expect(log.filter((e) => e.type === 'tool/result').map((e) => e.payload.outcome)).toMatchObject([{ kind: 'skipped' }]);
    expect(paid).toEqual([]);
    await handle.stop();
    const reopened = await make(store).openSession('s', { resume: 'manual' });
    expect(reopened.pendingRequest).toBeUndefined();
    expect(reopened.recovery.interruptedRuns).toEqual([]);
  });

  it('cancel_input withdraws a queued follow-up; cancel ends the running run', async () => {
    const store = makeStore();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow = defineTool({
      name: 'echo',
      description: '',
      parameters: z.object({ key: z.string() }),
      mode: 'parallel',
      execute: async (_a, ctx) => {
        await Promise.race([gate, new Promise((r) => ctx.signal.addEventListener('abort', r, { once: true }))]);
        return 'ok';
      },
    });
    const runtime = make(store, { tools: [slow] });
    const session = await runtime.openSession('s');
    await runtime.submit('s', { kind: 'input', inputId: 'a', mode: 'follow_up', message: 'first' });
    for (let i = 0; i < 500 && session.snapshot().status !== 'executing'; i++) await sleep(10);
    await runtime.submit('s', { kind: 'input', inputId: 'b', mode: 'follow_up', message: 'second' });
    await runtime.submit('s', { kind: 'cancel_input', entryId: 'x1', inputId: 'b' });
    await runtime.submit('s', { kind: 'cancel', entryId: 'x2', reason: 'user pressed stop' });
    const a = await runtime.waitForResult('s', 'a', { signal: AbortSignal.timeout(20_000), pollMs: 20 });
    expect(a.status).toBe('cancelled');
    release();
    await session.waitForIdle();
    for (let i = 0; i < 200 && (await store.work!.pending('s')).length > 0; i++) await sleep(10);
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'input/cancelled').map((e) => e.payload.inputId)).toEqual(['b']);
    expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.runId)).toEqual(['a']);
    expect((await store.work!.getEntry('s', 'x1'))!.applied!.outcome).toMatchObject({ status: 'applied', reason: 'input cancelled' });
  });

  it('waitForResult rejects with CancelledError when its signal aborts', async () => {
    const runtime = make(makeStore());
    await expect(runtime.waitForResult('nobody', 'r', { signal: AbortSignal.timeout(50), pollMs: 10 })).rejects.toSatisfy(isCancelledError);
  });
});

describe('inbox on LMDB across a machine restart', () => {
  it('entries and leases are journaled: a rebuild of the file from the journal keeps them', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const before = lmdbStore({ path: dir.path, bootId: 'boot-1' });
    await before.work.submit('s', { kind: 'input', inputId: 'i1', mode: 'follow_up', message: 'kept' });
    await before.work.submit('s', { kind: 'cancel', entryId: 'c1' });
    await before.work.claim('w1', { limit: 1, leaseMs: 60_000 });
    await before.close();
    const after = lmdbStore({ path: dir.path, bootId: 'boot-2' }); // another boot: data.mdb is rebuilt from the journal
    try {
      expect((await after.work.pending('s')).map((e) => e.entryId)).toEqual(['i1', 'c1']);
      expect((await after.work.listLeases()).map((l) => [l.sessionId, l.workerId, l.inboxSeq])).toEqual([['s', 'w1', 2]]);
    } finally {
      await after.close();
    }
  });
});
