import type { UIMessage } from 'ai';
import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, scriptedModel, webHandler, type EventStore, type ModelProvider } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { sleep } from '../helpers/runtime.js';
import { chatPost, chunksOf, chunksOfText, draft, drain, plain, uiChunks } from './chat-fixtures.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function make(model: ModelProvider, serve = false) {
  const runtime = createRuntime({ store: memoryStore(), model });
  cleanups.push(() => runtime.close());
  if (serve) {
    const worker = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
  }
  const handle = webHandler({ runtime, basePath: '/api', stream: { pollMs: 50 } });
  return { runtime, handle };
}

/** A model that streams "Hello " and waits for `release` before the rest of its answer. */
function gatedModel() {
  const gate = deferred();
  const model: ModelProvider = {
    modelId: 'gated',
    providerName: 'test',
    async call(_request, onEvent) {
      await sleep(200); // the POST's stream is reading the log by then
      onEvent({ type: 'text_delta', text: 'Hello ' });
      await gate.promise;
      onEvent({ type: 'text_delta', text: 'world' });
      return { message: { role: 'assistant', content: 'Hello world' }, finishReason: 'stop' };
    },
  };
  return { model, release: () => gate.resolve() };
}

/** Reads a stream until its text holds `marker`, then drops the connection: what a client had. */
async function cutAfter(res: Response, marker: string | RegExp): Promise<string> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  const has = (t: string) => (typeof marker === 'string' ? t.includes(marker) : marker.test(t));
  while (!has(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended without ${String(marker)}: ${text}`);
    text += value;
  }
  await reader.cancel();
  return text;
}

/** The message the AI SDK's client builds from a stream's text (maybe cut), continued from `message`. */
const built = (text: string, message?: UIMessage): Promise<UIMessage> => drain(uiChunks(new Response(text).body!), message);

describe('resumption is mapped onto log positions', () => {
  async function openRun(store: EventStore) {
    const { writerEpoch } = await store.attachWriter('s1');
    const head = await store.getHead('s1');
    const base = { runId: 'r1', attemptId: 'a1', runEpoch: 1, executionProfileFingerprint: 'f' };
    const drafts = [
      draft('run/start', { ...base, kind: 'prompt', inputId: 'u1' }),
      draft('user/message', { message: { role: 'user', content: 'go' } }),
      draft('step/start', {}, 1),
      draft(
        'assistant/message',
        {
          message: { role: 'assistant', content: 'working', toolCalls: [{ id: 'c1', name: 'deploy', arguments: '{}' }] },
          usage: { inputTokens: 1, outputTokens: 1 },
          finishReason: 'tool_calls',
          latencyMs: 1,
        },
        1,
      ),
      draft('tool/call', { callId: 'c1', name: 'deploy', arguments: {}, mode: 'exclusive', resources: [], idempotencyKey: 'k1' }, 1),
    ];
    await store.append('s1', writerEpoch, head!.lastSeq + 1, drafts);
    return { writerEpoch, base };
  }

  it('without Last-Event-ID the open reply is replayed from its user message; with Last-Event-ID N it continues after N, and the two carry each record once; appends are followed to the reply end', async () => {
    const { runtime, handle } = make(scriptedModel(['x']));
    const store = runtime.store;
    const { writerEpoch, base } = await openRun(store);
    const get = (headers: Record<string, string> = {}) => handle(new Request('http://app/api/chat/s1/stream', { headers }));
    const replayed = chunksOf(await get());
    const continued = chunksOf(await get({ 'last-event-id': '3' }));
    const outcome = { kind: 'completed', content: 'done', isError: false, concludesTurn: false, releaseResources: [] };
    await store.append('s1', writerEpoch, 6, [
      draft('tool/result', { callId: 'c1', name: 'deploy', outcome }, 1),
      draft('step/end', {}, 1),
      draft('step/start', {}, 2),
      draft(
        'assistant/message',
        {
          message: { role: 'assistant', content: 'Deployed.' },
          usage: { inputTokens: 1, outputTokens: 1 },
          latencyMs: 1,
          finishReason: 'stop',
        },
        2,
      ),
      draft('final/message', { finalMessageId: 'f1', runId: 'r1', content: 'Deployed.' }, 2),
      draft('step/end', {}, 2),
      draft('run/end', { ...base, status: 'succeeded', outcome: 'completed' }, 2),
    ]);
    const all = await replayed;
    const tail = await continued;
    expect(all[0]!.chunk).toMatchObject({ type: 'start', messageId: 'u1-reply' });
    expect(all.at(-2)!.chunk).toEqual({ type: 'finish', finishReason: 'stop' });
    expect(all.at(-1)!.chunk).toBe('[DONE]');
    expect(tail[0]!.chunk).toEqual({ type: 'start', messageId: 'u1-reply' });
    const ids = (xs: typeof all) => xs.flatMap((x) => (x.id ? [Number(x.id)] : []));
    expect(ids(all)).toEqual([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]); // each record's last chunk: its log position
    expect(ids(tail)).toEqual([4, 5, 6, 7, 8, 9, 10, 11, 12]);
    const after3 = all.slice(all.findIndex((x) => x.id === '3') + 1);
    expect(tail.slice(1)).toEqual(after3); // the continuation is the replay's chunks after position 3, exactly
    expect((await get()).status).toBe(204); // the run settled: nothing to resume
    // a client cut at position 3 that comes back after the run settled gets the same rest of the reply
    const late = await chunksOf(await get({ 'last-event-id': '3' }));
    expect(late).toEqual(tail);
    // one that holds the whole reply (its run's end) has nothing to resume
    expect((await get({ 'last-event-id': '12' })).status).toBe(204);
  });
  it("Last-Event-ID N:step inside a step opened by a record at or before N: reset-step, then the step's records again from its step/start on; the client ends with the replay's message", async () => {
    const { runtime, handle } = make(scriptedModel(['x']));
    const { writerEpoch, base } = await openRun(runtime.store);
    const get = (headers: Record<string, string> = {}) => handle(new Request('http://app/api/chat/s1/stream', { headers }));
    // the client saw the records to position 5 (the step opened at 3), then live text of that step
    const seen = await cutAfter(await get(), /id: 5\ndata: [^\n]*\n\n/);
    const live = `data: ${JSON.stringify({ type: 'text-start', id: 'live9' })}\n\ndata: ${JSON.stringify({ type: 'text-delta', id: 'live9', delta: 'half' })}\n\n`;
    const client = await built(seen + live);
    const continued = await get({ 'last-event-id': '5:step' });
    const replayed = await get();
    const outcome = { kind: 'completed', content: 'done', isError: false, concludesTurn: false, releaseResources: [] };
    await runtime.store.append('s1', writerEpoch, 6, [
      draft('tool/result', { callId: 'c1', name: 'deploy', outcome }, 1),
      draft('step/end', {}, 1),
      draft('run/end', { ...base, status: 'succeeded', outcome: 'completed' }, 1),
    ]);
    const tail = await continued.text();
    expect(
      chunksOfText(tail)
        .map((c) => c.chunk)
        .slice(0, 3),
    ).toEqual([{ type: 'start', messageId: 'u1-reply' }, { type: 'reset-step' }, { type: 'text-start', id: 't4' }]);
    const whole = await built(await replayed.text());
    expect(plain(await built(tail, client))).toEqual(plain(whole));
  });
});

describe('a resume position is one the log has', () => {
  it('a Last-Event-ID past the log head at request time is a 400 ValidationError, never a stream that waits or repeats; the head itself streams on', async () => {
    const { runtime, handle } = make(scriptedModel(['x']));
    const { writerEpoch } = await runtime.store.attachWriter('s1');
    const base = { runId: 'r1', attemptId: 'a1', runEpoch: 1, executionProfileFingerprint: 'f' };
    await runtime.store.append('s1', writerEpoch, 1, [
      draft('run/start', { ...base, kind: 'prompt', inputId: 'u1' }),
      draft('user/message', { message: { role: 'user', content: 'go' } }),
    ]);
    const get = (id: string) => handle(new Request('http://app/api/chat/s1/stream', { headers: { 'last-event-id': id } }));
    for (const id of ['3', '3:step', '102']) {
      const res = await get(id);
      expect(res.status, id).toBe(400);
      expect(await res.json()).toMatchObject({ error: 'ValidationError', message: expect.stringContaining('past the log') });
    }
    const atHead = await get('2');
    expect(atHead.status).toBe(200);
    await atHead.body!.cancel();
    expect((await handle(new Request('http://app/api/chat/other/stream', { headers: { 'last-event-id': '1' } }))).status).toBe(400);
  });
});

describe('a resume by Last-Event-ID carries each part once', () => {
  const prompt = (id: string) =>
    chatPost({ id: 's', messages: [{ id, role: 'user', parts: [{ type: 'text', text: 'go' }] }], trigger: 'submit-message' });

  it('a client cut while a step streams its text resumes from the last id it saw: the streamed text leaves, the step and its text come once, as in the history', async () => {
    const { model, release } = gatedModel();
    const { handle } = make(model, true);
    const cut = await cutAfter(await handle(prompt('m1')), '"delta":"Hello "');
    const lastId = chunksOfText(cut).findLast((c) => c.id !== undefined)!.id!;
    const partial = await built(cut);
    expect(partial.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text)).toEqual(['Hello ']);
    const resumed = handle(new Request('http://app/api/chat/s/stream', { headers: { 'last-event-id': lastId } }));
    release();
    const merged = await built(await (await resumed).text(), partial);
    const history = (await (await handle(new Request('http://app/api/chat/s/messages'))).json()) as UIMessage[];
    expect(plain(merged)).toEqual(history.at(-1));
    expect(merged.parts.map((p) => p.type).filter((t) => t === 'step-start' || t === 'text')).toEqual(['step-start', 'text']);
  }, 20_000);
});
