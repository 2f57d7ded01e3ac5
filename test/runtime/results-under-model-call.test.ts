import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  defineTool,
  memoryStore,
  type EventDraft,
  type ModelMessage as Message,
  type ModelProvider,
  type ModelRequest,
} from '../../src/index.js';
import { LogWriter } from '../../src/persistence/log-writer.js';
import { SessionProjection } from '../../src/persistence/projection.js';
import { hookedStore } from '../helpers/lmdb-path.js';
import { ids, logOf, memRuntime, storeWithAppend, typesOf } from '../helpers/runtime.js';

// The step's results commit lands under the next model call (docs/architecture.md, "Pipelined
// results commit"): the call is built over the results and starts before they are durable; nothing
// of it is shown or committed until they are, and it fails with their commit's error if it fails.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const lookup = defineTool({
  name: 'lookup',
  description: 'looks up',
  mode: 'parallel',
  parameters: z.object({ q: z.string() }),
  execute: ({ q }) => `found ${q}`,
});

/** A model that asks for one lookup, then answers; it records what it saw and streams its answer. */
function recordingModel(onCall: (request: ModelRequest, n: number) => void = () => {}): ModelProvider & { requests: ModelRequest[] } {
  const requests: ModelRequest[] = [];
  return {
    modelId: 'recording',
    requests,
    async call(request, onEvent) {
      requests.push(request);
      onCall(request, requests.length);
      if (requests.length === 1) {
        return {
          message: { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'lookup', arguments: '{"q":"x"}' }] },
          finishReason: 'tool_calls',
        };
      }
      onEvent?.({ type: 'text_delta', text: 'the answer' });
      return { message: { role: 'assistant', content: 'the answer' }, finishReason: 'stop' };
    },
  };
}

const isResults = (drafts: readonly EventDraft[]) => drafts.some((d) => d.type === 'tool/result');

describe('the results commit lands under the next model call', () => {
  it('the next model call starts before the results are durable, and its request holds them', async () => {
    let landed = false;
    let release: () => void = () => {};
    const base = memoryStore();
    const store = storeWithAppend(base, async (id, epoch, seq, drafts) => {
      if (!isResults(drafts)) return base.append(id, epoch, seq, drafts);
      await new Promise<void>((r) => {
        release = r;
        setTimeout(r, 2000); // a runtime that waited for the commit before calling would still end
      });
      const out = await base.append(id, epoch, seq, drafts);
      landed = true;
      return out;
    });
    const seen: { landed: boolean; tool: Message | undefined }[] = [];
    const model = recordingModel((request, n) => {
      if (n === 2) {
        seen.push({ landed, tool: request.messages.find((m) => m.role === 'tool') });
        release();
      }
    });
    const { runtime } = memRuntime({ model, tools: [lookup] }, store);
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'the answer' });
    expect(seen).toEqual([{ landed: false, tool: expect.objectContaining({ role: 'tool', toolCallId: 'c1', content: 'found x' }) }]);
    // the log keeps its order: the results, then the next step's start and answer
    const types = typesOf(await logOf(base, 's'));
    expect(types.indexOf('tool/result')).toBeLessThan(types.lastIndexOf('step/start'));
    expect(types.indexOf('step/end')).toBeLessThan(types.lastIndexOf('assistant/message'));
  });

  it("subscribers see the step's results before anything of the next step (its start, its deltas)", async () => {
    const store = hookedStore(memoryStore(), (drafts) => (isResults(drafts) ? new Promise((r) => setTimeout(r, 30)) : undefined));
    const { runtime } = memRuntime({ model: recordingModel(), tools: [lookup] }, store);
    const s = await runtime.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type === 'step_start' ? `step_start ${e.event.step}` : e.event.type));
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const at = (t: string) => seen.indexOf(t);
    expect(at('tool_end')).toBeGreaterThan(-1);
    expect(at('step_end')).toBeLessThan(at('step_start 2'));
    expect(at('tool_end')).toBeLessThan(at('step_start 2'));
    expect(at('step_start 2')).toBeLessThan(at('message_delta'));
  });

  it("a results commit that fails fails the run with its error: the model's answer is neither shown nor committed, the results are written with run/end", async () => {
    let failed = false;
    const base = memoryStore();
    const store = hookedStore(base, (drafts) => {
      if (!failed && isResults(drafts)) {
        failed = true;
        throw new Error('disk hiccup');
      }
    });
    const model = recordingModel();
    const { runtime } = memRuntime({ model, tools: [lookup] }, store);
    const s = await runtime.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type));
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('failed');
    expect(r.error?.message).toContain('disk hiccup');
    expect(model.requests).toHaveLength(2); // the call made under the failed commit: its answer is dropped
    expect(seen).not.toContain('message_delta');
    const log = await logOf(base, 's');
    expect(log.filter((e) => e.type === 'assistant/message')).toHaveLength(1);
    const types = typesOf(log);
    expect(types.slice(types.indexOf('tool/result'))).toEqual(['tool/result', 'step/end', 'step/start', 'run/end']);
  });

  it('a cancel that comes while the results land, after the next model call answered, commits nothing of that answer', async () => {
    for (const hold of [0, 5, 20]) {
      const base = memoryStore();
      let release: () => void = () => {};
      let onAnswer: () => void = () => {};
      const answered = new Promise<void>((resolve) => (onAnswer = resolve));
      const model = recordingModel((_, n) => {
        if (n === 2) onAnswer();
      });
      const store = storeWithAppend(base, async (id, epoch, seq, drafts) => {
        if (isResults(drafts)) await new Promise<void>((r) => (release = r));
        return base.append(id, epoch, seq, drafts);
      });
      const { runtime } = memRuntime({ model, tools: [lookup] }, store);
      const s = await runtime.openSession('s');
      const result = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
      await answered;
      const cancelled = s.requestCancel(); // its append waits behind the results
      await new Promise((r) => setTimeout(r, hold));
      release();
      expect(await cancelled).toBe(true);
      expect((await result).status).toBe('cancelled');
      const types = typesOf(await logOf(base, 's'));
      expect(types.slice(types.indexOf('run/end'))).toEqual(['run/end']);
      expect(types.filter((t) => t === 'assistant/message')).toHaveLength(1);
    }
  });

  it('a results commit that fails while the run waits for a slow required subscriber fails the run with its error, calling no model', async () => {
    let failed = false;
    const store = hookedStore(memoryStore(), (drafts) => {
      if (!failed && isResults(drafts)) {
        failed = true;
        throw new Error('disk hiccup');
      }
    });
    const model = recordingModel();
    const { runtime } = memRuntime({ model, tools: [lookup] }, store);
    const s = await runtime.openSession('s');
    // a required subscriber of capacity 1 that takes 20 ms an envelope: the run waits for it after the results commit
    s.subscribe(() => new Promise((r) => setTimeout(r, 20)), { name: 'slow', required: true, capacity: 1 });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('failed');
    expect(r.error?.message).toContain('disk hiccup');
    expect(model.requests).toHaveLength(1);
  });
});

describe('LogWriter.commitAhead', () => {
  /** A writer on a memory store; `failFirstResults`: the first append holding a tool result fails. `order`: each append's types. */
  async function writer(failFirstResults = false) {
    const base = memoryStore();
    cleanups.push(() => base.close());
    let fail = failFirstResults;
    const order: string[][] = [];
    const store = storeWithAppend(base, async (id, epoch, seq, drafts) => {
      order.push(drafts.map((d) => d.type));
      if (fail && isResults(drafts)) {
        fail = false;
        throw new Error('transient');
      }
      return base.append(id, epoch, seq, drafts);
    });
    const attach = await store.attachWriter('s');
    const projection = new SessionProjection();
    return { order, projection, w: new LogWriter(store, 's', attach.writerEpoch, attach.lastSeq + 1, projection) };
  }
  const AT = { turn: 1, step: 1, attempt: 1 };
  const stageResult = (w: LogWriter, content: string) =>
    w.stage('tool/result', AT, {
      callId: 'c1',
      name: 'lookup',
      outcome: { kind: 'completed', content, isError: false, concludesTurn: false, releaseResources: [] },
      startedAt: 1,
      endedAt: 2,
    });

  it('shows the messages of the commit under way until it lands, and the request digest over them is the one the landed surface gives', async () => {
    const { projection, w } = await writer();
    stageResult(w, 'found x');
    w.stage('step/end', AT, {});
    await w.commitAhead();
    expect(w.pendingMessages).toEqual([{ role: 'tool', toolCallId: 'c1', name: 'lookup', content: 'found x' }]);
    expect(w.pendingTokens).toBeGreaterThan(0);
    const ahead = projection.surface.requestDigest('p', 't', w.pendingMessages);
    await w.landed();
    expect(w.pendingMessages).toEqual([]);
    expect(projection.surface.messages).toHaveLength(1);
    expect(projection.surface.requestDigest('p', 't')).toBe(ahead);
  });

  it('a commit asked for while one is under way waits for it, and after a failure writes the drafts it put back first', async () => {
    const { order, w } = await writer(true);
    stageResult(w, 'x');
    await w.commitAhead();
    w.stage('step/end', AT, {});
    const closing = w.commit();
    await expect(w.landed()).rejects.toThrow('transient');
    await closing;
    expect(order).toEqual([['tool/result'], ['tool/result', 'step/end']]);
  });

  it('a commitAhead that failed stays reported (landed rejects, aheadFailure) until the next commit writes what it put back', async () => {
    const { w } = await writer(true);
    stageResult(w, 'x');
    await w.commitAhead();
    await w.settled();
    await new Promise((r) => setTimeout(r, 5)); // long after it settled
    expect(w.aheadFailure?.error).toEqual(new Error('transient'));
    expect(w.pendingMessages).toEqual([]);
    await expect(w.landed()).rejects.toThrow('transient');
    const records = await w.commit();
    expect(records.map((e) => e.type)).toEqual(['tool/result']);
    expect(w.aheadFailure).toBeUndefined();
    await expect(w.landed()).resolves.toBeUndefined();
  });

  it('a draft that does not validate is committed the ordinary way, failing as it always did', async () => {
    const { w } = await writer();
    w.stage('tool/result', AT, { callId: 'c1' } as never);
    await expect(w.commitAhead()).rejects.toThrow(/tool\/result/);
    expect(w.pendingMessages).toEqual([]);
  });
});
