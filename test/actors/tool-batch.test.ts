import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, scriptedModel, type ToolContext } from '../../src/index.js';
import { ids, lmdbRuntime, logOf, memRuntime, sleep } from '../helpers/runtime.js';
import { unansweredInLog, unansweredInRequest } from '../helpers/unanswered.js';

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
    const slow = defineTool({
      name: 'slow',
      description: '',
      mode: 'parallel',
      parameters: z.object({ i: z.number() }),
      execute: async ({ i }) => (await t.run(`p${i}`, 30), `ok${i}`),
    });
    const calls = Array.from({ length: 6 }, (_, i) => ({ name: 'slow', arguments: { i } }));
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: calls }, 'done']),
      tools: [slow],
      config: { maxParallelTools: 3 },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    expect(t.peak).toBe(3);
    const results = (await logOf(store, 's')).filter((e) => e.type === 'tool/result');
    expect(results.map((e) => (e.payload.outcome as { content: string }).content)).toEqual(['ok0', 'ok1', 'ok2', 'ok3', 'ok4', 'ok5']);
  });

  it('exclusive calls never overlap anything and keep their order; shared resources never overlap', async () => {
    const t = tracker();
    const par = defineTool({
      name: 'par',
      description: '',
      mode: 'parallel',
      parameters: z.object({ i: z.number(), r: z.string().optional() }),
      resources: (a) => (a.r ? [a.r] : []),
      execute: async ({ i }) => (await t.run(`p${i}`, 20), 'p'),
    });
    const exc = defineTool({
      name: 'exc',
      description: '',
      parameters: z.object({ i: z.number() }),
      execute: async ({ i }) => (await t.run(`e${i}`, 20), 'e'),
    });
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
    const ok = defineTool({
      name: 'ok',
      description: '',
      parameters: z.object({ n: z.string() }),
      execute: ({ n }) => (ran.push(n), 'fine'),
    });
    const bad = defineTool({
      name: 'bad',
      description: '',
      parameters: z.object({}),
      execute: () => {
        ran.push('bad');
        throw new Error('disk full');
      },
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([
        {
          toolCalls: [
            { name: 'ok', arguments: { n: 'a' } },
            { name: 'bad', arguments: {} },
            { name: 'ok', arguments: { n: 'b' } },
          ],
        },
        'done',
      ]),
      tools: [ok, bad],
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(ran).toEqual(['a', 'bad']);
    const outcomes = (await logOf(store, 's')).filter((e) => e.type === 'tool/result').map((e) => e.payload.outcome);
    expect(outcomes).toMatchObject([
      { kind: 'completed', isError: false },
      { kind: 'completed', isError: true, content: 'disk full' },
      { kind: 'skipped' },
    ]);
  });

  it('timeoutMs aborts a call through its signal', async () => {
    let aborted = false;
    const hang = defineTool({
      name: 'hang',
      description: '',
      parameters: z.object({}),
      timeoutMs: 40,
      execute: (_a, ctx) =>
        new Promise((_, reject) =>
          ctx.signal.addEventListener('abort', () => {
            aborted = true;
            reject(new Error('stopped'));
          }),
        ),
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'hang', arguments: {} }] }, 'gave up']),
      tools: [hang],
    });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    expect(aborted).toBe(true);
    const outcome = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome;
    expect(outcome).toMatchObject({ kind: 'cancelled', settled: true, partialContent: expect.stringContaining('timed out after 40 ms') });
  });

  it('a tool that ignores its signal past the grace period is recorded uncertain-hanging and keeps its locks', async () => {
    const stubborn = defineTool({
      name: 'stubborn',
      description: '',
      parameters: z.object({}),
      resources: ['printer'],
      timeoutMs: 20,
      execute: () => new Promise(() => {}),
    });
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
      name: 'kinds',
      description: '',
      mode: 'parallel',
      parameters: z.object({ k: z.string() }),
      execute: ({ k }, ctx) => {
        seen.push(ctx);
        ctx.emit({ progress: k });
        switch (k) {
          case 'skipped':
            return { kind: 'skipped', reason: 'not needed' };
          case 'cancelled':
            return { kind: 'cancelled', settled: true, partialContent: 'half' };
          case 'us':
            return { kind: 'uncertain-settled', content: 'maybe' };
          case 'uh':
            return { kind: 'uncertain-hanging', content: 'unknown', resourceLocks: ['k'] };
          default:
            return { kind: 'completed', content: 'yes', structured: { v: 1 } };
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
    const outcomes = (await logOf(store, 's'))
      .filter((e) => e.type === 'tool/result')
      .map((e) => (e.payload.outcome as { kind: string }).kind);
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
      name: 'finish',
      description: '',
      parameters: z.object({}),
      execute: () => ({
        kind: 'completed',
        content: 'the answer is 42',
        concludesTurn: true,
        additionalMessages: [{ role: 'user', content: 'note: audited' }],
      }),
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

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('resources and uncertain-hanging calls', () => {
  it("an uncertain-hanging outcome returned by a tool locks the call's declared resources", async () => {
    let runs = 0;
    const deploy = defineTool({
      name: 'deploy',
      description: '',
      resources: ['prod'],
      parameters: z.object({}),
      execute: () => {
        runs++;
        return { kind: 'uncertain-hanging' as const, content: 'the deploy API timed out; it may still be rolling out' };
      },
    });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([
        { toolCalls: [{ name: 'deploy', arguments: {} }] },
        { toolCalls: [{ name: 'deploy', arguments: {} }] },
        'done',
      ]),
      tools: [deploy],
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'deploy' });
    // DESIGN §2: "resourceLocks are always the call's declared resources"; §4.5: a call needing a
    // resource held by an uncertain-hanging lock is not run, the run ends `blocked`
    expect(runs).toBe(1);
    expect(r).toMatchObject({ status: 'blocked', blockedBy: ['prod'] });
  });

  it('calls naming the same resource never overlap, even when one of them hangs past its timeout', async () => {
    let active = 0;
    let maxActive = 0;
    const write = defineTool({
      name: 'write',
      description: '',
      mode: 'parallel',
      resources: ['file'],
      timeoutMs: 20,
      parameters: z.object({ n: z.number() }),
      // ignores its signal (e.g. a blocking client): keeps running for 300 ms
      execute: async ({ n }) => {
        active++;
        maxActive = Math.max(maxActive, active);
        await sleep(n === 1 ? 300 : 10);
        active--;
        return 'written';
      },
    });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([
        {
          toolCalls: [
            { name: 'write', arguments: { n: 1 } },
            { name: 'write', arguments: { n: 2 } },
          ],
        },
        'done',
      ]),
      tools: [write],
      config: { cancelGraceMs: 20 },
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(350);
    expect(maxActive).toBe(1);
  });
});

describe('batch results', () => {
  // guarantees.md, Tools: "Whatever a tool throws (even a value whose `String()` throws) becomes an
  // error result, and an outcome the log cannot record ... becomes an error result too, so no call is
  // left unanswered." A synchronous tool's return value is normalised outside any try: a value whose
  // `kind` getter throws makes the call actor fail (`call.failed`), the batch errors, and the run ends
  // `failed` with the tool/call (and the parallel sibling it aborted) never answered.
  it('a sync tool returning a value whose getter throws gets an error result; no call of the batch is left unanswered', async () => {
    let siblingRan = false;
    const slow = defineTool({
      name: 'slow',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: async () => (await sleep(30), (siblingRan = true), 'slow done'),
    });
    const bad = defineTool({
      name: 'bad',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () =>
        ({
          get kind(): 'completed' {
            throw new Error('getter boom');
          },
        }) as never,
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'slow', arguments: {} },
          { name: 'bad', arguments: {} },
        ],
      },
      'done',
    ]);
    const { runtime, store } = memRuntime({ model, tools: [slow, bad] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const log = await logOf(store, 's');
    expect(unansweredInLog(log)).toEqual([]);
    const badResult = log.find((e) => e.type === 'tool/result' && e.payload.name === 'bad');
    expect(badResult?.payload.outcome).toMatchObject({ kind: 'completed', isError: true });
    expect(r.status).toBe('succeeded');
    expect(siblingRan).toBe(true);
  });

  // DESIGN §4 item 5: each call's context carries an `idempotencyKey` (stable across recovery);
  // guarantees.md: exclusive calls are passed to `reconcile(args, ctx)` "with the same idempotencyKey".
  // The key is `${sessionId}/${runId}/${callId}`: a provider that numbers its call ids per message
  // (call_0, call_0, …) gives two different calls of one run the same key, so an idempotent backend
  // (or reconcile looking the key up) treats the second charge as the first.
  it('two different calls of one run get different idempotency keys even when the model reuses a call id', async () => {
    const keys: string[] = [];
    const charge = defineTool({
      name: 'charge',
      description: '',
      parameters: z.object({ amount: z.number() }),
      execute: ({ amount }, ctx) => (keys.push(ctx.idempotencyKey), `charged ${amount}`),
    });
    const model = scriptedModel([
      { toolCalls: [{ id: 'call_0', name: 'charge', arguments: { amount: 1 } }] },
      { toolCalls: [{ id: 'call_0', name: 'charge', arguments: { amount: 2 } }] },
      'done',
    ]);
    const { runtime } = memRuntime({ model, tools: [charge] });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    expect(keys).toHaveLength(2);
    expect(keys[0]).not.toBe(keys[1]);
  });

  // guarantees.md: "no tool call is ever left unanswered on the surface"; a prompt's messages logged as
  // user/message "must have role user (no tool calls, no tool result)". `completed.additionalMessages`
  // are logged as user/message with no such check: an additional message carrying a tool call puts an
  // assistant tool call nobody answers on the surface, and the next model request contains it.
  it('additionalMessages cannot put an unanswered tool call on the surface', async () => {
    const t = defineTool({
      name: 't',
      description: '',
      parameters: z.object({}),
      execute: () => ({
        kind: 'completed',
        content: 'ok',
        additionalMessages: [{ role: 'assistant', content: '', toolCalls: [{ id: 'ghost', name: 't', arguments: '{}' }] }],
      }),
    });
    const model = scriptedModel([{ toolCalls: [{ name: 't', arguments: {} }] }, 'done']);
    const { runtime } = memRuntime({ model, tools: [t] });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(model.requests).toHaveLength(2);
    expect(unansweredInRequest(model.requests[1]!.messages)).toEqual([]);
  });
});
