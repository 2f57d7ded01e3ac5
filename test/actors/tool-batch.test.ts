import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, scriptedModel, type ToolContext } from '../../src/index.js';
import { ids, lmdbRuntime, logOf, sleep } from '../helpers/runtime.js';

function tracker() {
  let running = 0;
  const spans: { name: string; start: number; end: number }[] = [];
  let peak = 0;
  let clock = 0;
  return {
    spans,
    get peak() {
      return peak;
    },
    async run(name: string, ms: number) {
      running++;
      peak = Math.max(peak, running);
      const start = ++clock;
      await sleep(ms);
      spans.push({ name, start, end: ++clock });
      running--;
    },
  };
}

const overlap = (a: { start: number; end: number }, b: { start: number; end: number }) => a.start < b.end && b.start < a.end;

describe('tool batches (real LMDB)', () => {
  it('parallel calls really overlap and never exceed maxParallelTools', async () => {
    const t = tracker();
    const slow = defineTool({ name: 'slow', description: '', mode: 'parallel', parameters: z.object({ i: z.number() }), execute: async ({ i }) => (await t.run(`p${i}`, 30), `ok${i}`) });
    const calls = Array.from({ length: 6 }, (_, i) => ({ name: 'slow', arguments: { i } }));
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ toolCalls: calls }, 'done']), tools: [slow], config: { maxParallelTools: 3 } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    expect(t.peak).toBe(3);
    const results = (await logOf(store, 's')).filter((e) => e.type === 'tool/result');
    expect(results.map((e) => (e.payload.outcome as { content: string }).content)).toEqual(['ok0', 'ok1', 'ok2', 'ok3', 'ok4', 'ok5']);
  });

  it('exclusive calls never overlap anything and keep their order; shared resources never overlap', async () => {
    const t = tracker();
    const par = defineTool({ name: 'par', description: '', mode: 'parallel', parameters: z.object({ i: z.number(), r: z.string().optional() }), resources: (a) => (a.r ? [a.r] : []), execute: async ({ i }) => (await t.run(`p${i}`, 20), 'p') });
    const exc = defineTool({ name: 'exc', description: '', parameters: z.object({ i: z.number() }), execute: async ({ i }) => (await t.run(`e${i}`, 20), 'e') });
    const calls = [
      { name: 'par', arguments: { i: 1 } },
      { name: 'par', arguments: { i: 2 } },
      { name: 'exc', arguments: { i: 3 } },
      { name: 'par', arguments: { i: 4, r: 'db' } },
      { name: 'par', arguments: { i: 5, r: 'db' } },
      { name: 'par', arguments: { i: 6 } },
      { name: 'exc', arguments: { i: 7 } },
    ];
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ toolCalls: calls }, 'done']), tools: [par, exc] });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    const span = (n: string) => t.spans.find((x) => x.name === n)!;
    expect(overlap(span('p1'), span('p2'))).toBe(true);
    for (const e of ['e3', 'e7']) for (const other of t.spans) if (other.name !== e) expect(overlap(span(e), other)).toBe(false);
    expect(span('e3').start).toBeGreaterThan(Math.max(span('p1').end, span('p2').end));
    expect(span('p4').start).toBeGreaterThan(span('e3').end);
    expect(overlap(span('p4'), span('p5'))).toBe(false);
    expect(overlap(span('p4'), span('p6'))).toBe(true);
    expect(span('e7').start).toBeGreaterThan(Math.max(span('p4').end, span('p5').end, span('p6').end));
  });

  it('an exclusive failure truncates the batch: later calls are skipped and never run', async () => {
    const ran: string[] = [];
    const ok = defineTool({ name: 'ok', description: '', parameters: z.object({ n: z.string() }), execute: ({ n }) => (ran.push(n), 'fine') });
    const bad = defineTool({ name: 'bad', description: '', parameters: z.object({}), execute: () => { ran.push('bad'); throw new Error('disk full'); } });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'ok', arguments: { n: 'a' } }, { name: 'bad', arguments: {} }, { name: 'ok', arguments: { n: 'b' } }] }, 'done']),
      tools: [ok, bad],
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(ran).toEqual(['a', 'bad']);
    const outcomes = (await logOf(store, 's')).filter((e) => e.type === 'tool/result').map((e) => e.payload.outcome);
    expect(outcomes).toMatchObject([{ kind: 'completed', isError: false }, { kind: 'completed', isError: true, content: 'disk full' }, { kind: 'skipped' }]);
  });

  it('timeoutMs aborts a call through its signal', async () => {
    let aborted = false;
    const hang = defineTool({
      name: 'hang', description: '', parameters: z.object({}), timeoutMs: 40,
      execute: (_a, ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => { aborted = true; reject(new Error('stopped')); })),
    });
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'hang', arguments: {} }] }, 'gave up']), tools: [hang] });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    expect(aborted).toBe(true);
    const outcome = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome;
    expect(outcome).toMatchObject({ kind: 'cancelled', settled: true, partialContent: expect.stringContaining('timed out after 40 ms') });
  });

  it('a tool that ignores its signal past the grace period is recorded uncertain-hanging and keeps its locks', async () => {
    const stubborn = defineTool({ name: 'stubborn', description: '', parameters: z.object({}), resources: ['printer'], timeoutMs: 20, execute: () => new Promise(() => {}) });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'stubborn', arguments: {} }] }, { toolCalls: [{ name: 'stubborn', arguments: {} }] }]),
      tools: [stubborn],
      config: { cancelGraceMs: 30 },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const outcome = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome;
    expect(outcome).toMatchObject({ kind: 'uncertain-hanging', resourceLocks: ['printer'] });
    // the next call needing the printer is not run: the run ends blocked, naming the lock
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'blocked', blockedBy: ['printer'] });
  });

  it('supports all five outcome kinds, and each call gets signal, a stable idempotencyKey, ids and emit', async () => {
    const seen: ToolContext[] = [];
    const kinds = defineTool({
      name: 'kinds', description: '', mode: 'parallel', parameters: z.object({ k: z.string() }),
      execute: ({ k }, ctx) => {
        seen.push(ctx);
        ctx.emit({ progress: k });
        switch (k) {
          case 'skipped': return { kind: 'skipped', reason: 'not needed' };
          case 'cancelled': return { kind: 'cancelled', settled: true, partialContent: 'half' };
          case 'us': return { kind: 'uncertain-settled', content: 'maybe' };
          case 'uh': return { kind: 'uncertain-hanging', content: 'unknown', resourceLocks: ['k'] };
          default: return { kind: 'completed', content: 'yes', structured: { v: 1 } };
        }
      },
    });
    const calls = ['completed', 'skipped', 'cancelled', 'us', 'uh'].map((k) => ({ name: 'kinds', arguments: { k } }));
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ toolCalls: calls }, 'ok']), tools: [kinds] });
    const s = await runtime.openSession('s');
    const updates: unknown[] = [];
    const ends: { logSeq?: number; startedAt?: number; endedAt?: number }[] = [];
    s.events$.subscribe((e) => {
      if (e.event.type === 'tool_update') updates.push(e.event.update);
      if (e.event.type === 'tool_end') ends.push({ logSeq: e.logSeq, startedAt: e.event.startedAt, endedAt: e.event.endedAt });
    });
    const id = ids();
    await s.execute({ kind: 'prompt', ...id, message: 'go' });
    const outcomes = (await logOf(store, 's')).filter((e) => e.type === 'tool/result').map((e) => (e.payload.outcome as { kind: string }).kind);
    expect(outcomes).toEqual(['completed', 'skipped', 'cancelled', 'uncertain-settled', 'uncertain-hanging']);
    expect(seen).toHaveLength(5);
    for (const ctx of seen) {
      expect(ctx.signal).toBeInstanceOf(AbortSignal);
      expect(ctx).toMatchObject({ sessionId: 's', runId: id.runId });
      expect(ctx.idempotencyKey).toBe(`s/${id.runId}/1/${ctx.callId}`); // session/run/step/call
    }
    expect(updates).toHaveLength(5);
    // tool_end comes with the committed result: its log seq and the call's timings
    expect(ends).toHaveLength(5);
    for (const e of ends) expect(e.logSeq).toBeGreaterThan(0);
    expect(ends.filter((e) => e.startedAt !== undefined && e.endedAt! >= e.startedAt)).toHaveLength(4); // skipped has none
  });

  it('concludesTurn ends the run with that content; additionalMessages join the surface', async () => {
    const finish = defineTool({
      name: 'finish', description: '', parameters: z.object({}),
      execute: () => ({ kind: 'completed', content: 'the answer is 42', concludesTurn: true, additionalMessages: [{ role: 'user', content: 'note: audited' }] }),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'finish', arguments: {} }] }]);
    const delivered: string[] = [];
    const { runtime, store } = lmdbRuntime({ model, tools: [finish], delivery: { deliver: async (f) => void delivered.push(f.content) } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'the answer is 42', steps: 1 });
    expect(model.requests).toHaveLength(1);
    expect(delivered).toEqual(['the answer is 42']);
    const log = await logOf(store, 's');
    const i = log.findIndex((e) => e.type === 'tool/result');
    expect(log[i + 1]).toMatchObject({ type: 'user/message', payload: { message: { content: 'note: audited' } } });
    expect(s.snapshot().messages.at(-1)).toMatchObject({ content: 'note: audited' });
  });
});
