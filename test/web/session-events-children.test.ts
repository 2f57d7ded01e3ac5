import { afterEach, describe, expect, it } from 'vitest';
import { agentTool, createRuntime, defineAgent, memoryStore, scriptedModel, type EventStore, type ModelProvider } from '../../src/index.js';
import { sessionEvents, type SessionEventsOptions } from '../../src/web/session-events.js';
import { initialView, reduceView, type ChildView, type ViewItem } from '../../src/web/view.js';
import type { ChildFrame, Frame } from '../../src/web/wire.js';
import { deferred } from '../helpers/drafts.js';
import { logOf } from '../helpers/runtime.js';
import { SseReader } from './sse-reader.js';

// sessionEvents of a parent session: each agentTool call's child session comes nested in `child` frames.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function open(store: EventStore, sessionId: string, options: SessionEventsOptions = {}, headers: Record<string, string> = {}) {
  const res = sessionEvents(store, sessionId, new Request(`http://test/sessions/x/events`, { headers }), { pollMs: 30, ...options });
  const r = new SseReader(res);
  cleanups.push(() => r.cancel());
  return r;
}

const childFrames = (r: SseReader) => r.messages.flatMap((m) => (m.frame.kind === 'child' ? [m.frame] : []));
/** The innermost frame of a child frame, with the path of (call id, child session) it is nested under. */
function unwrap(f: ChildFrame): { path: string[]; frame: Exclude<Frame, ChildFrame> } {
  const path = [f.sessionId];
  let inner = f.frame;
  while (inner.kind === 'child') {
    path.push(inner.sessionId);
    inner = inner.frame;
  }
  return { path, frame: inner };
}
const recordTypes = (r: SseReader, path: string) =>
  childFrames(r)
    .map(unwrap)
    .flatMap((u) => (u.path.join(' > ') === path && u.frame.kind === 'committed' ? [u.frame.record.type] : []));

const ask = (id: string, name: string, input: string) => ({ toolCalls: [{ id, name, arguments: { input } }] });

describe('sessionEvents: child sessions', () => {
  it("each agent call's child session is sent whole, nested under the call, its own children nested in it", async () => {
    const store = memoryStore();
    const checker = defineAgent({ name: 'checker', instructions: 'c', model: scriptedModel(['checked']) });
    const researcher = defineAgent({
      name: 'researcher',
      instructions: 'r',
      model: scriptedModel([ask('k1', 'checker', 'is tea hot?'), 'tea is hot']),
      tools: [agentTool(checker)],
    });
    const runtime = createRuntime({
      store,
      model: scriptedModel([ask('c1', 'researcher', 'tea?'), 'done']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' })).status).toBe('succeeded');

    const r = open(store, 's');
    const grandchild = 's/r/1/c1 > s/r/1/c1/answer/1/k1';
    await r.until((x) => recordTypes(x, grandchild).includes('run/end'), 5000, "the grandchild's run/end");
    await r.until((x) => recordTypes(x, 's/r/1/c1').includes('run/end'), 5000, "the child's run/end");
    for (const path of ['s/r/1/c1', grandchild]) {
      const frames = childFrames(r)
        .map(unwrap)
        .filter((u) => u.path.join(' > ') === path && u.frame.kind === 'committed');
      const seqs = frames.map((u) => (u.frame as { logSeq: number }).logSeq);
      expect(seqs).toEqual(seqs.map((_, i) => i + 1)); // the child's whole log, in order
      expect(recordTypes(r, path)).toEqual(expect.arrayContaining(['session/attached', 'run/start', 'final/message', 'run/end']));
    }
    expect(childFrames(r).every((f) => f.callId === 'c1')).toBe(true);
    expect(r.messages.filter((m) => m.frame.kind === 'child').every((m) => m.id === undefined)).toBe(true);
    // the call's record comes before any frame of its child
    const callAt = r.messages.findIndex((m) => m.frame.kind === 'committed' && m.frame.record.type === 'tool/call');
    expect(r.messages.findIndex((m) => m.frame.kind === 'child')).toBeGreaterThan(callAt);

    // the view folds them into the call's item
    let view = initialView('s');
    for (const m of r.messages) view = reduceView(view, m.frame);
    const call = view.items.find((i): i is Extract<ViewItem, { kind: 'tool' }> => i.kind === 'tool')!;
    expect(call.child).toMatchObject({ sessionId: 's/r/1/c1', runStatus: 'succeeded' });
    const inner = call.child!.items.find((i): i is Extract<ViewItem, { kind: 'tool' }> => i.kind === 'tool')!;
    expect((inner.child as ChildView).items.at(-2)).toMatchObject({ kind: 'final', text: 'checked' });
  });

  it("a running child's text deltas come as live frames under its call, also on a connection resumed after the call's record", async () => {
    const store = memoryStore();
    const gate = deferred<void>();
    const streamed = deferred<void>();
    const inner = scriptedModel(['the notes']);
    const childModel: ModelProvider = {
      modelId: 'gated',
      async call(request, onEvent) {
        onEvent({ type: 'text_delta', text: 'thinking ' });
        streamed.resolve();
        await gate.promise;
        return inner.call(request, onEvent);
      },
    };
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel });
    const runtime = createRuntime({
      store,
      model: scriptedModel([ask('c1', 'researcher', 'tea?'), 'done']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    const live = { live: runtime.liveEnvelopes$('s'), childEnvelopes: (id: string) => runtime.liveEnvelopes$(id) };
    const first = open(store, 's', live);
    const s = await runtime.openSession('s');
    const result = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await streamed.promise;
    const liveText = (r: SseReader) =>
      childFrames(r)
        .map(unwrap)
        .flatMap((u) => (u.frame.kind === 'live' && u.frame.event.type === 'message_delta' ? [u.frame.event.text] : []));
    await first.until((x) => liveText(x).includes('thinking '), 5000, "the child's live delta");
    // a second connection resumes after the parent's tool/call: the open call's child is followed
    const callSeq = first.committed().find((f) => f.record.type === 'tool/call')!.logSeq;
    const resumed = open(store, 's', live, { 'last-event-id': String(callSeq) });
    await resumed.until((x) => recordTypes(x, 's/r/1/c1').includes('run/start'), 5000, "the open call's child");
    expect(resumed.committed().map((f) => f.logSeq)[0] ?? callSeq + 1).toBeGreaterThan(callSeq);
    gate.resolve();
    expect((await result).status).toBe('succeeded');
    for (const r of [first, resumed]) await r.until((x) => recordTypes(x, 's/r/1/c1').includes('run/end'), 5000, "the child's run/end");
    let view = initialView('s');
    for (const m of first.messages) view = reduceView(view, m.frame);
    const call = view.items.find((i): i is Extract<ViewItem, { kind: 'tool' }> => i.kind === 'tool')!;
    expect(call.child).toMatchObject({ runStatus: 'succeeded' });
    expect(call.child!.streaming).toBeUndefined();
  });

  it('a connection resumed inside a run follows the children of its calls still without a result, not those answered before the cursor', async () => {
    const store = memoryStore();
    const gate = deferred<void>();
    const waiting = deferred<void>();
    const inner = scriptedModel(['notes'], { loop: true });
    const childModel: ModelProvider = {
      modelId: 'gated',
      async call(request, onEvent) {
        if (request.messages.at(-1)?.content === 'coffee?') {
          waiting.resolve();
          await gate.promise;
        }
        return inner.call(request, onEvent);
      },
    };
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: childModel });
    const model = scriptedModel([ask('c0', 'researcher', 'tea?'), ask('c1', 'researcher', 'coffee?'), 'done']);
    const runtime = createRuntime({ store, model, tools: [agentTool(researcher)] });
    cleanups.push(() => runtime.close());
    const result = (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    await waiting.promise;
    const log = await logOf(store, 's');
    const call = log.find((e) => e.type === 'tool/call' && e.payload.callId === 'c1')!;
    const r = open(store, 's', {}, { 'last-event-id': String(call.seq) });
    await r.until((x) => recordTypes(x, 's/r/2/c1').includes('run/start'), 5000, "the open call's child");
    gate.resolve();
    expect((await result).status).toBe('succeeded');
    await r.until((x) => recordTypes(x, 's/r/2/c1').includes('run/end'), 5000, "the open call's child's run/end");
    expect(new Set(childFrames(r).map((f) => f.sessionId))).toEqual(new Set(['s/r/2/c1']));
  });

  it("a call id the model repeats in a later run: each call's child is followed, its frames naming that call's record", async () => {
    const store = memoryStore();
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: scriptedModel(['notes'], { loop: true }) });
    const model = scriptedModel([ask('c1', 'researcher', 'tea?'), 'done', ask('c1', 'researcher', 'coffee?'), 'done']);
    const runtime = createRuntime({ store, model, tools: [agentTool(researcher)] });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    for (const runId of ['r1', 'r2']) await s.execute({ kind: 'prompt', runId, attemptId: runId, message: 'go' });
    const r = open(store, 's');
    for (const child of ['s/r1/1/c1', 's/r2/1/c1'])
      await r.until((x) => recordTypes(x, child).includes('run/end'), 5000, `${child}'s run/end`);
    const calls = r.committed().filter((f) => f.record.type === 'tool/call');
    const seqOf = new Map(childFrames(r).map((f) => [f.sessionId, f.callSeq]));
    expect(seqOf).toEqual(
      new Map([
        ['s/r1/1/c1', calls[0]!.logSeq],
        ['s/r2/1/c1', calls[1]!.logSeq],
      ]),
    );
  });

  it('children: false sends no child frames', async () => {
    const store = memoryStore();
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: scriptedModel(['notes']) });
    const runtime = createRuntime({
      store,
      model: scriptedModel([ask('c1', 'researcher', 'tea?'), 'done']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
    const r = open(store, 's', { children: false });
    await r.until((x) => x.committed().some((f) => f.record.type === 'run/end'), 5000, 'run/end');
    expect(childFrames(r)).toEqual([]);
  });
});
