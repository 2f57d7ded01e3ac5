import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel, type Envelope } from '../../src/index.js';
import { SubscriberHub } from '../../src/streams/subscribers.js';
import { deferred } from '../helpers/drafts.js';
import { ids, lmdbRuntime, logOf, sleep, storeWithAppend } from '../helpers/runtime.js';

const env = (seq: number): Envelope => ({ runId: 'r1', attemptId: 'a1', seq, event: { type: 'step_start', step: seq } });
const settle = () => new Promise<void>((r) => setImmediate(r));
const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({ t: z.string() }), execute: ({ t }) => t });

describe('SubscriberHub review: capacity counts envelopes waiting besides the one being delivered', () => {
  it('an idle subscriber that keeps up is not closed by a burst of capacity + 1 envelopes', async () => {
    const hub = new SubscriberHub();
    const seen: number[] = [];
    hub.subscribe((e) => void seen.push(e.seq), { name: 'fast', capacity: 1 });
    // one synchronous burst (e.g. tool_end + step_end of one commit): 1 about to be delivered, 1 waiting
    hub.offer(env(1));
    hub.offer(env(2));
    await hub.whenIdle();
    expect(hub.takeErrors()).toEqual([]);
    expect(seen).toEqual([1, 2]);
    // the bound still holds: one more than that overflows
    hub.offer(env(3));
    hub.offer(env(4));
    hub.offer(env(5));
    expect(hub.takeErrors()).toMatchObject([{ consumer: 'fast', seq: 5, reason: 'closed' }]);
  });

  it('a synchronous listener with capacity 1 gets a whole tool step without a delivery error', async () => {
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']), tools: [echo] });
    const s = await rt.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type), { name: 'fast', capacity: 1 });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    expect(r.deliveryErrors).toEqual([]);
    expect(seen).toContain('tool_end');
    expect(seen.at(-1)).toBe('execution_finished');
    await rt.close();
  });
});

describe('envelopes review: every step that starts ends with a step_end', () => {
  it('a step whose tool calls are rejected ends with step_end carrying the logSeq of its step/end', async () => {
    const store = memoryStore();
    const rt = createRuntime({ store, model: scriptedModel([{ toolCalls: [{ name: 'nope', arguments: {} }] }, 'final']), tools: [echo] });
    const s = await rt.openSession('s');
    const envs: Envelope[] = [];
    s.events$.subscribe((e) => envs.push(e));
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    const stepEnds = (await logOf(store, 's')).filter((e) => e.type === 'step/end').map((e) => e.seq);
    expect(envs.filter((e) => e.event.type === 'step_start')).toHaveLength(2);
    expect(envs.filter((e) => e.event.type === 'step_end').map((e) => e.logSeq)).toEqual(stepEnds);
    await rt.close();
  });

  it('a blocked step ends with tool_end (skipped) and step_end envelopes', async () => {
    const deploy = defineTool({
      name: 'deploy',
      description: '',
      resources: ['prod'],
      parameters: z.object({}),
      execute: () => ({ kind: 'uncertain-hanging' as const, content: 'timed out' }),
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'deploy', arguments: {} }] }, { toolCalls: [{ name: 'deploy', arguments: {} }] }, 'done']),
      tools: [deploy],
    });
    const s = await runtime.openSession('s');
    const envs: Envelope[] = [];
    s.events$.subscribe((e) => envs.push(e));
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'deploy' });
    expect(r.status).toBe('blocked');
    const log = await logOf(store, 's');
    const results = log.filter((e) => e.type === 'tool/result').map((e) => e.seq);
    expect(envs.filter((e) => e.event.type === 'tool_end').map((e) => e.logSeq)).toEqual(results);
    expect(envs.filter((e) => e.event.type === 'step_end').map((e) => e.logSeq)).toEqual(log.filter((e) => e.type === 'step/end').map((e) => e.seq));
  });
});

describe('close review: a required subscriber gets every envelope published before close', () => {
  it('whenRequiredDrained waits until required queues are handed to their listeners, not for optional ones', async () => {
    const hub = new SubscriberHub();
    const gate = deferred();
    const stuck = deferred();
    const got: number[] = [];
    hub.subscribe(async (e) => { got.push(e.seq); await gate.promise; }, { required: true });
    hub.subscribe(() => stuck.promise, { name: 'slow-optional', deliveryTimeoutMs: 60_000 });
    hub.offer(env(1));
    hub.offer(env(2));
    let done = false;
    void hub.whenRequiredDrained().then(() => (done = true));
    await settle();
    expect(got).toEqual([1]);
    expect(done).toBe(false);
    gate.resolve();
    await settle();
    expect(got).toEqual([1, 2]);
    expect(done).toBe(true);
    hub.close();
  });

  it('a required listener that awaits session.close inside its delivery does not stall the close', async () => {
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel(['hi']) });
    const s = await rt.openSession('s');
    let closed = false;
    s.subscribe(
      async (e) => {
        if (e.event.type !== 'execution_finished') return;
        await s.close();
        closed = true;
      },
      { name: 'closer', required: true, deliveryTimeoutMs: 60_000 },
    );
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(50);
    expect(closed).toBe(true);
    await rt.close();
  });

  it('session.close after execute still delivers the queued envelopes, execution_finished included', async () => {
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']), tools: [echo] });
    const s = await rt.openSession('s');
    const seen: string[] = [];
    const all: string[] = [];
    s.events$.subscribe((e) => all.push(e.event.type));
    s.subscribe(async (e) => { seen.push(e.event.type); await sleep(2); }, { name: 'audit', required: true, capacity: 4 });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    await rt.close();
    expect(seen).toEqual(all);
    expect(seen.at(-1)).toBe('execution_finished');
  });
});

describe('envelope review: message_end announces a committed message', () => {
  // DESIGN §6: "an envelope for a committed log event also carries logSeq"; the product rule:
  // every transition is written to the log before its effect becomes visible
  it('message_end comes after its assistant/message is committed and carries its logSeq', async () => {
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']), tools: [echo] });
    const s = await rt.openSession('s');
    const ends: Envelope[] = [];
    s.subscribe((e) => void (e.event.type === 'message_end' && ends.push(e)), { name: 'ends' });
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    const messages = (await logOf(rt.store, 's')).filter((e) => e.type === 'assistant/message');
    expect(ends.map((e) => e.logSeq)).toEqual(messages.map((m) => m.seq));
    await rt.close();
  });

  it('a message whose commit fails is never announced as a message_end', async () => {
    const inner = memoryStore();
    let failed = false;
    const store = storeWithAppend(inner, async (id, epoch, seq, drafts) => {
      if (!failed && drafts.some((d) => d.type === 'assistant/message')) {
        failed = true;
        throw new Error('disk hiccup');
      }
      return inner.append(id, epoch, seq, drafts);
    });
    const rt = createRuntime({ store, model: scriptedModel(['the answer']) });
    const s = await rt.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type), { name: 'all' });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    expect(r.status).toBe('failed');
    expect(seen).not.toContain('message_end');
    await rt.close();
  });
});

describe('envelope review: logSeq on tool_start and execution_finished', () => {
  it('tool_start carries the seq of its tool/call, execution_finished the seq of its run/end', async () => {
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']), tools: [echo] });
    const s = await rt.openSession('s');
    const seen: Envelope[] = [];
    s.subscribe((e) => void seen.push(e), { name: 'all' });
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    const log = await logOf(rt.store, 's');
    const call = log.find((e) => e.type === 'tool/call')!;
    const end = log.find((e) => e.type === 'run/end')!;
    expect(seen.find((e) => e.event.type === 'tool_start')?.logSeq).toBe(call.seq);
    expect(seen.find((e) => e.event.type === 'execution_finished')?.logSeq).toBe(end.seq);
    await rt.close();
  });
});
