import type { ToolCallIntent } from '../../src/contracts/calls.js';
import { describe, expect, it } from 'vitest';
import { createActor, waitFor } from 'xstate';
import { callActor } from '../../src/actors/tool-call.js';
import type { ToolCallOutput } from '../../src/contracts/calls.js';
import type { ToolOutcome } from '../../src/contracts/tools.js';
import { runnableCalls, toolBatchMachine, type CallState, type ToolBatchContext } from '../../src/machines/tool-batch.machine.js';
import { deferred } from '../helpers/drafts.js';

const call = (callId: string, mode: ToolCallIntent['mode'] = 'parallel', resources: string[] = []): ToolCallIntent => ({
  callId,
  name: `tool_${callId}`,
  arguments: {},
  mode,
  resources,
  idempotencyKey: `s1/r1/${callId}`,
});

const ok = (content = 'ok'): ToolOutcome => ({ kind: 'completed', content, isError: false, concludesTurn: false, releaseResources: [] });
const toolError = (content = 'boom'): ToolOutcome => ({
  kind: 'completed',
  content,
  isError: true,
  concludesTurn: false,
  releaseResources: [],
});

/** Runs one batch the way a run does: invoked with its calls, its output is every call's result. */
function startBatch(toolCall: ReturnType<typeof callActor>, calls: ToolCallIntent[], maxParallel: number) {
  return createActor(toolBatchMachine.provide({ actors: { toolCall } }), { input: { runId: 'r1', maxParallel, calls } }).start();
}

/** Lets every pending promise reaction and actor event run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * A fake toolCall actor: each call blocks on its own gate until the test finishes it, and the
 * harness records start order, concurrency and which calls ever ran side by side.
 */
function harness() {
  const gates = new Map<string, ReturnType<typeof deferred<ToolOutcome>>>();
  const gate = (id: string) => {
    let d = gates.get(id);
    if (!d) gates.set(id, (d = deferred<ToolOutcome>()));
    return d;
  };
  const started: string[] = [];
  const running = new Set<string>();
  const overlapped = new Map<string, Set<string>>();
  let maxConcurrent = 0;

  const toolCall = callActor(async (input) => {
    const id = input.call.callId;
    started.push(id);
    overlapped.set(id, new Set(running));
    for (const other of running) overlapped.get(other)!.add(id);
    running.add(id);
    maxConcurrent = Math.max(maxConcurrent, running.size);
    try {
      const outcome = await gate(id).promise;
      return { callId: id, name: input.call.name, outcome, startedAt: 1, endedAt: 2 };
    } finally {
      running.delete(id);
    }
  });

  const start = (calls: ToolCallIntent[], maxParallel: number) => startBatch(toolCall, calls, maxParallel);

  /** Finishes a running call and lets the batch react. */
  const finish = async (id: string, outcome: ToolOutcome = ok(id)) => {
    expect(running.has(id), `${id} should be running when finished`).toBe(true);
    gate(id).resolve(outcome);
    await settle();
  };

  return {
    start,
    finish,
    started,
    running,
    overlapped: (id: string) => [...(overlapped.get(id) ?? [])].sort(),
    get maxConcurrent() {
      return maxConcurrent;
    },
  };
}

describe('toolBatchMachine', () => {
  it('starts parallel calls together when the cap allows', async () => {
    const h = harness();
    const actor = h.start([call('a'), call('b'), call('c')], 4);
    await settle();
    expect(h.started).toEqual(['a', 'b', 'c']);
    expect([...h.running].sort()).toEqual(['a', 'b', 'c']);
    await h.finish('b');
    await h.finish('a');
    await h.finish('c');
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('never runs more parallel calls than maxParallel', async () => {
    const h = harness();
    const actor = h.start([call('a'), call('b'), call('c'), call('d'), call('e')], 2);
    await settle();
    expect(h.started).toEqual(['a', 'b']);
    await h.finish('b');
    expect(h.started).toEqual(['a', 'b', 'c']);
    await h.finish('a');
    expect(h.started).toEqual(['a', 'b', 'c', 'd']);
    await h.finish('c');
    await h.finish('d');
    await h.finish('e');
    expect(h.maxConcurrent).toBe(2);
    const snap = actor.getSnapshot();
    expect(snap.status).toBe('done');
    expect(snap.output!.map((o) => o.outcome.kind)).toEqual(['completed', 'completed', 'completed', 'completed', 'completed']);
  });

  it('runs an exclusive call only after every earlier call finished, and alone', async () => {
    const h = harness();
    const actor = h.start([call('p1'), call('p2'), call('x3', 'exclusive'), call('p4')], 4);
    await settle();
    expect(h.started).toEqual(['p1', 'p2']);
    await h.finish('p1');
    expect(h.started).toEqual(['p1', 'p2']);
    await h.finish('p2');
    expect(h.started).toEqual(['p1', 'p2', 'x3']);
    expect([...h.running]).toEqual(['x3']);
    await h.finish('x3');
    expect(h.started).toEqual(['p1', 'p2', 'x3', 'p4']);
    await h.finish('p4');
    expect(h.overlapped('x3')).toEqual([]);
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('holds calls after an exclusive barrier until it finished', async () => {
    const h = harness();
    const actor = h.start([call('x1', 'exclusive'), call('p2'), call('p3'), call('x4', 'exclusive'), call('x5', 'exclusive')], 4);
    await settle();
    expect(h.started).toEqual(['x1']);
    await h.finish('x1');
    expect(h.started).toEqual(['x1', 'p2', 'p3']);
    await h.finish('p3');
    expect(h.started).toEqual(['x1', 'p2', 'p3']);
    await h.finish('p2');
    expect(h.started).toEqual(['x1', 'p2', 'p3', 'x4']);
    await h.finish('x4');
    expect(h.started).toEqual(['x1', 'p2', 'p3', 'x4', 'x5']);
    await h.finish('x5');
    for (const x of ['x1', 'x4', 'x5']) expect(h.overlapped(x)).toEqual([]);
    expect(h.maxConcurrent).toBe(2);
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('never overlaps parallel calls naming the same resource; a different resource may run beside them', async () => {
    const h = harness();
    const actor = h.start([call('a', 'parallel', ['file:x']), call('b', 'parallel', ['file:x']), call('c', 'parallel', ['file:y'])], 4);
    await settle();
    expect(h.started).toEqual(['a', 'c']);
    await h.finish('a');
    expect(h.started).toEqual(['a', 'c', 'b']);
    await h.finish('b');
    await h.finish('c');
    expect(h.overlapped('a')).toEqual(['c']);
    expect(h.overlapped('b')).toEqual(['c']);
    expect(h.overlapped('a')).not.toContain('b');
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('does not let a resource-blocked call hold back later calls with free resources', async () => {
    const h = harness();
    h.start([call('a', 'parallel', ['k']), call('b', 'parallel', ['k']), call('c', 'parallel', ['k', 'j']), call('d')], 4);
    await settle();
    expect(h.started).toEqual(['a', 'd']);
    await h.finish('a');
    expect(h.started).toEqual(['a', 'd', 'b']);
    await h.finish('b');
    expect(h.started).toEqual(['a', 'd', 'b', 'c']);
  });

  const failures: [string, ToolOutcome][] = [
    ['completed with isError', toolError()],
    ['cancelled', { kind: 'cancelled', settled: true, partialContent: 'half', resourceLocks: [] }],
    ['uncertain-settled', { kind: 'uncertain-settled', content: 'maybe' }],
    ['uncertain-hanging', { kind: 'uncertain-hanging', content: 'still going', resourceLocks: ['k'] }],
  ];

  it.each(failures)(
    'an exclusive call that ends %s truncates the batch: later calls are skipped, never started',
    async (_label, outcome) => {
      const h = harness();
      const actor = h.start([call('p1'), call('x2', 'exclusive'), call('p3'), call('x4', 'exclusive')], 4);
      await settle();
      await h.finish('p1');
      await h.finish('x2', outcome);
      const snap = actor.getSnapshot();
      expect(snap.status).toBe('done');
      expect(h.started).toEqual(['p1', 'x2']);
      const out = snap.output!;
      expect(out.map((o) => o.callId)).toEqual(['p1', 'x2', 'p3', 'x4']);
      expect(out[0]!.outcome).toEqual(ok('p1'));
      expect(out[1]!.outcome).toEqual(outcome);
      expect(out[2]!.outcome.kind).toBe('skipped');
      expect(out[3]!.outcome.kind).toBe('skipped');
      expect(out[2]!.name).toBe('tool_p3');
      expect((out[2]!.outcome as { reason: string }).reason).toContain('x2');
    },
  );

  it('a failing parallel call does not truncate the batch', async () => {
    const h = harness();
    const actor = h.start([call('p1'), call('p2'), call('x3', 'exclusive')], 4);
    await settle();
    await h.finish('p1', toolError());
    await h.finish('p2', { kind: 'cancelled', settled: true, resourceLocks: [] });
    expect(h.started).toEqual(['p1', 'p2', 'x3']);
    await h.finish('x3');
    expect(actor.getSnapshot().output!.map((o) => o.outcome.kind)).toEqual(['completed', 'cancelled', 'completed']);
  });

  it('outputs results in call order, whatever order they finished in', async () => {
    const h = harness();
    const actor = h.start([call('a'), call('b'), call('c')], 3);
    await settle();
    await h.finish('c', ok('C'));
    await h.finish('a', ok('A'));
    await h.finish('b', ok('B'));
    const out = actor.getSnapshot().output!;
    expect(out.map((o) => o.callId)).toEqual(['a', 'b', 'c']);
    expect(out.map((o) => (o.outcome as { content: string }).content)).toEqual(['A', 'B', 'C']);
  });

  it('settles at once for an empty batch', async () => {
    const h = harness();
    const actor = h.start([], 4);
    const snap = await waitFor(actor, (s) => s.status === 'done');
    expect(snap.output).toEqual([]);
    expect(h.started).toEqual([]);
  });

  it('errors (rather than hanging) when a toolCall actor rejects, so the run can end on it', async () => {
    const toolCall = callActor(async () => {
      throw new Error('tool actor crashed');
    });
    const errors: unknown[] = [];
    const actor = startBatch(toolCall, [call('a')], 4);
    actor.subscribe({ error: (e) => errors.push(e) });
    await settle();
    // the error is raised one timer tick later, after the batch stopped its other calls
    for (let i = 0; i < 50 && actor.getSnapshot().status !== 'error'; i++) await new Promise((r) => setTimeout(r, 1));
    expect(actor.getSnapshot().status).toBe('error');
    expect((errors[0] as Error).message).toBe('tool actor crashed');
  });
});

describe('runnableCalls', () => {
  /** A batch context: `started` calls have run (or run, when also `running`); `results` have an outcome. */
  const ctx = (
    calls: ToolCallIntent[],
    over: {
      maxParallel?: number;
      started?: string[];
      running?: string[];
      results?: Map<string, ToolCallOutput>;
      truncatedBy?: string;
    } = {},
  ): ToolBatchContext => {
    const states: CallState[] = calls.map((c) =>
      over.running?.includes(c.callId) ? 'running' : over.started?.includes(c.callId) || over.results?.has(c.callId) ? 'done' : 'queued',
    );
    return {
      runId: 'r1',
      calls,
      maxParallel: over.maxParallel ?? 4,
      states,
      results: calls.map((c) => over.results?.get(c.callId) ?? null),
      truncatedBy: over.truncatedBy,
      cancelled: false,
    };
  };
  const done = (...ids: string[]): Map<string, ToolCallOutput> =>
    new Map(ids.map((id) => [id, { callId: id, name: `tool_${id}`, outcome: ok(), startedAt: 1, endedAt: 2 }]));
  const runnable = (c: ToolBatchContext) => runnableCalls(c).map((i) => c.calls[i]!.callId);

  it('returns the first maxParallel parallel calls', () => {
    expect(runnable(ctx([call('a'), call('b'), call('c')], { maxParallel: 2 }))).toEqual(['a', 'b']);
  });

  it('counts running calls against the cap', () => {
    const c = ctx([call('a'), call('b'), call('c'), call('d')], { maxParallel: 3, started: ['a', 'b'], running: ['a', 'b'] });
    expect(runnable(c)).toEqual(['c']);
  });

  it('returns nothing while the cap is full', () => {
    const c = ctx([call('a'), call('b'), call('c')], { maxParallel: 2, started: ['a', 'b'], running: ['a', 'b'] });
    expect(runnableCalls(c)).toEqual([]);
  });

  it('never returns a started call', () => {
    const c = ctx([call('a'), call('b')], { started: ['a'], running: [], results: done('a') });
    expect(runnable(c)).toEqual(['b']);
  });

  it('starts an exclusive call first in the batch alone', () => {
    expect(runnable(ctx([call('x', 'exclusive'), call('a')]))).toEqual(['x']);
  });

  it('stops at an exclusive barrier: parallel calls before it run, none after it', () => {
    expect(runnable(ctx([call('a'), call('b'), call('x', 'exclusive'), call('c')]))).toEqual(['a', 'b']);
  });

  it('holds an exclusive call while an earlier call runs', () => {
    const c = ctx([call('a'), call('x', 'exclusive')], { started: ['a'], running: ['a'] });
    expect(runnableCalls(c)).toEqual([]);
  });

  it('releases an exclusive call once every earlier call has a result', () => {
    const c = ctx([call('a'), call('b'), call('x', 'exclusive'), call('c')], { started: ['a', 'b'], results: done('a', 'b') });
    expect(runnable(c)).toEqual(['x']);
  });

  it('returns nothing while an exclusive call runs', () => {
    const c = ctx([call('x', 'exclusive'), call('a'), call('b')], { started: ['x'], running: ['x'] });
    expect(runnableCalls(c)).toEqual([]);
  });

  it('skips a call whose resources a running call holds, and takes later free ones', () => {
    const c = ctx([call('a', 'parallel', ['k']), call('b', 'parallel', ['k']), call('c', 'parallel', ['j'])], {
      started: ['a'],
      running: ['a'],
    });
    expect(runnable(c)).toEqual(['c']);
  });

  it('does not pick two calls with a shared resource in the same round', () => {
    const c = ctx([call('a', 'parallel', ['k', 'j']), call('b', 'parallel', ['j']), call('c', 'parallel', ['m'])]);
    expect(runnable(c)).toEqual(['a', 'c']);
  });

  it('returns nothing once the batch is truncated', () => {
    const c = ctx([call('x', 'exclusive'), call('a')], { started: ['x'], results: done('x'), truncatedBy: 'x' });
    expect(runnableCalls(c)).toEqual([]);
  });
});
