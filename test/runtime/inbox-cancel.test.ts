import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, scriptedModel, type EventStore, type Runtime } from '../../src/index.js';
import { StoreUnavailableError } from '../../src/contracts/store-errors.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { localStores } from '../helpers/backends.js';

// An inbox `cancel` entry is applied exactly once, to the run running or open when it is first
// applied: applied again (its mark lost), it finds that run to cancel, or none — never a later run.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const backends = localStores(cleanups);

/** Each run asks to `pay` (approval needed), then answers "done". */
function make(store: EventStore): Runtime {
  const pay = defineTool({
    name: 'pay',
    description: '',
    parameters: z.object({ amount: z.number() }),
    needsApproval: true,
    execute: ({ amount }) => `paid ${amount}`,
  });
  const model = scriptedModel(
    [(r) => (r.messages.at(-1)?.role === 'tool' ? 'done' : { toolCalls: [{ name: 'pay', arguments: { amount: 1 } }] })],
    {
      loop: true,
    },
  );
  const runtime = createRuntime({ store, model, tools: [pay] });
  cleanups.push(() => runtime.close());
  return runtime;
}

async function appliedOf(store: EventStore, entryId: string) {
  for (let i = 0; i < 300 && !(await store.work!.getEntry('s1', entryId))?.applied; i++) await sleep(10);
  return (await store.work!.getEntry('s1', entryId))?.applied?.outcome;
}

const endsOf = async (store: EventStore, runId: string) =>
  (await logOf(store, 's1')).filter((e) => e.type === 'run/end' && e.payload.runId === runId).map((e) => e.payload.status);

describe.each(backends)('inbox cancel (%s)', (_name, makeStore) => {
  it('a cancel racing an approval is applied once and marked applied; a later entry never applies it to a later run', async () => {
    const store = makeStore();
    const runtime = make(store);
    const s = await runtime.openSession('s1');
    const r1 = await s.run('first').result;
    expect(r1.status).toBe('suspended');
    // (whichever starts its attempt first, the run ends cancelled)
    await Promise.all([
      runtime.submit('s1', { kind: 'cancel', entryId: 'cancel-1' }),
      s.approve((r1.pendingRequest as { calls: { callId: string }[] }).calls[0]!.callId).then(
        (x) => x.run?.result.catch(() => undefined),
        () => undefined,
      ),
    ]);
    expect(await appliedOf(store, 'cancel-1')).toEqual({ status: 'applied', reason: expect.stringContaining(r1.runId) });
    await s.waitForIdle();
    expect((await endsOf(store, r1.runId)).at(-1)).toBe('cancelled');
    const r2 = await s.run('second').result;
    expect(r2.status).toBe('suspended');
    await runtime.submit('s1', { kind: 'cancel_input', entryId: 'ci-1', inputId: 'nothing-queued' });
    expect(await appliedOf(store, 'ci-1')).toBeDefined();
    expect(await endsOf(store, r2.runId)).toEqual(['suspended']);
    expect(s.snapshot().status).toBe('suspended');
  });

  it('a cancel applied again after its mark was lost finds the run it cancelled, never a later one', async () => {
    const store = makeStore();
    const work = store.work!;
    const mark = work.markApplied.bind(work);
    let failMarks = 1;
    work.markApplied = (...a) =>
      failMarks-- > 0 ? Promise.reject(new StoreUnavailableError('injected: mark lost', 'not_written')) : mark(...a);
    const runtime = make(store);
    const s = await runtime.openSession('s1');
    const r1 = await s.run('first').result;
    await runtime.submit('s1', { kind: 'cancel', entryId: 'cancel-1' });
    for (let i = 0; i < 300 && (await endsOf(store, r1.runId)).length < 2; i++) await sleep(10);
    expect(await endsOf(store, r1.runId)).toEqual(['suspended', 'cancelled']);
    await s.waitForIdle();
    const r2 = await s.run('second').result;
    expect(r2.status).toBe('suspended');
    await runtime.submit('s1', { kind: 'cancel_input', entryId: 'ci-1', inputId: 'nothing-queued' });
    expect(await appliedOf(store, 'cancel-1')).toEqual({ status: 'applied', reason: `run ${r1.runId} is not open: nothing to cancel` });
    expect(await appliedOf(store, 'ci-1')).toBeDefined();
    expect(await endsOf(store, r2.runId)).toEqual(['suspended']);
  });
});
