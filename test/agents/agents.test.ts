import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineAgent,
  defineTool,
  isUnknownAgentError,
  isValidationError,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type EventRecord,
  type EventStore,
} from '../../src/index.js';
import { lmdbPath } from '../helpers/lmdb-path.js';

// An agent is a value: defineAgent, createRuntime({ agents }), openSession(id, { agent }), the agent in run/start.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function logOf(store: EventStore, id: string): Promise<EventRecord[]> {
  const out: EventRecord[] = [];
  for await (const e of store.readEvents(id)) out.push(e);
  return out;
}

const lookup = defineTool({
  name: 'lookup',
  description: 'looks up',
  parameters: z.object({ q: z.string() }),
  mode: 'parallel',
  execute: ({ q }) => `found ${q}`,
});

describe('defineAgent', () => {
  it('refuses unknown keys, a name longer than 52 characters and a name that is not letters, digits, _ and -', () => {
    expect(() => defineAgent({ name: 'a', instructions: 'x', instruction: 'y' } as never)).toThrow(/instruction/);
    expect(() => defineAgent({ name: 'a'.repeat(53), instructions: 'x' })).toThrow(/52/);
    expect(() => defineAgent({ name: 'a b', instructions: 'x' })).toThrow(/letters/);
    expect(defineAgent({ name: 'a'.repeat(52), instructions: 'x' }).name).toHaveLength(52);
  });

  it('names are unique per runtime: two agents of one name, or one named default, are refused', () => {
    const model = scriptedModel([]);
    const a1 = defineAgent({ name: 'a', instructions: 'x' });
    const a2 = defineAgent({ name: 'a', instructions: 'y' });
    expect(() => createRuntime({ model, store: memoryStore(), agents: [a1, a2] })).toThrow(/two agents are named a/);
    expect(() => createRuntime({ model, store: memoryStore(), agents: [defineAgent({ name: 'default', instructions: 'x' })] })).toThrow(
      /default/,
    );
    // the same value twice (given, and reached through a handoff) is one agent
    const b = defineAgent({ name: 'b', instructions: 'x', handoffs: [a1] });
    const rt = createRuntime({ model, store: memoryStore(), agents: [a1, b] });
    cleanups.push(() => rt.close());
  });

  it('a handoff to a name the runtime does not define is refused at createRuntime', () => {
    const b = defineAgent({ name: 'b', instructions: 'x', handoffs: ['nobody'] });
    try {
      createRuntime({ model: scriptedModel([]), store: memoryStore(), agents: [b] });
      expect.unreachable();
    } catch (e) {
      expect(isValidationError(e)).toBe(true);
      expect(String(e)).toMatch(/nobody/);
    }
  });
});

describe('a session runs one agent', () => {
  it('a new session runs the agent openSession asks for: its instructions, tools and model, and run/start and session/attached name it', async () => {
    const store = memoryStore();
    const runtimeModel = scriptedModel(['from the default agent']);
    const researcherModel = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'lookup', arguments: { q: 'tea' } }] }, 'tea is a drink'], {
      modelId: 'researcher-model',
    });
    const researcher = defineAgent({ name: 'researcher', instructions: 'You research.', model: researcherModel, tools: [lookup] });
    const runtime = createRuntime({ store, model: runtimeModel, systemPrompt: 'You are the default.', agents: [researcher] });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s', { agent: researcher });
    const r = await s.run('what is tea?').result;
    expect(r.finalMessage).toBe('tea is a drink');
    expect(researcherModel.requests[0]!.messages[0]).toEqual({ role: 'system', content: 'You research.' });
    expect(researcherModel.requests[0]!.tools.map((t) => t.name)).toEqual(['lookup']);
    expect(runtimeModel.requests).toHaveLength(0);
    const log = await logOf(store, 's');
    expect(log.find((e) => e.type === 'session/attached')!.payload.agent).toBe('researcher');
    expect(log.find((e) => e.type === 'run/start')!.payload.agent).toBe('researcher');
    // the default agent is the runtime's own model, tools and systemPrompt
    const d = await runtime.openSession('d');
    expect((await d.run('hi').result).finalMessage).toBe('from the default agent');
    expect(runtimeModel.requests[0]!.messages[0]).toEqual({ role: 'system', content: 'You are the default.' });
    expect((await logOf(store, 'd')).find((e) => e.type === 'run/start')!.payload.agent).toBe('default');
  });

  it("the agent's name is part of the execution-profile fingerprint", async () => {
    const store = memoryStore();
    const model = scriptedModel(['a', 'b']);
    const x = defineAgent({ name: 'x', instructions: 'same' });
    const y = defineAgent({ name: 'y', instructions: 'same' });
    const runtime = createRuntime({ store, model, agents: [x, y] });
    cleanups.push(() => runtime.close());
    await (await runtime.openSession('sx', { agent: 'x' })).run('hi').result;
    await (await runtime.openSession('sy', { agent: 'y' })).run('hi').result;
    const fp = async (id: string) => (await logOf(store, id)).find((e) => e.type === 'run/start')!.payload.executionProfileFingerprint;
    expect(await fp('sx')).not.toBe(await fp('sy'));
  });

  it('a session with history runs the agent its log records, whatever openSession asks for', async () => {
    const cleanup = lmdbPath(cleanups);
    const x = defineAgent({ name: 'x', instructions: 'I am x' });
    const y = defineAgent({ name: 'y', instructions: 'I am y' });
    const m1 = scriptedModel(['first']);
    const r1 = cleanup.rt({ model: m1, agents: [x, y] });
    await (await r1.openSession('s', { agent: 'x' })).run('hi').result;
    await r1.close();
    const m2 = scriptedModel(['second']);
    const r2 = cleanup.rt({ model: m2, agents: [x, y] });
    const s = await r2.openSession('s', { agent: 'y' });
    await s.run('again').result;
    expect(m2.requests[0]!.messages[0]).toEqual({ role: 'system', content: 'I am x' });
  });

  it('a recorded agent the runtime does not define is an UnknownAgentError at open, with nothing written', async () => {
    const cleanup = lmdbPath(cleanups);
    const x = defineAgent({ name: 'x', instructions: 'I am x' });
    const r1 = cleanup.rt({ model: scriptedModel(['first']), agents: [x] });
    await (await r1.openSession('s', { agent: x })).run('hi').result;
    await r1.close();
    const store = lmdbStore({ path: cleanup.path });
    const r2 = cleanup.rt({ model: scriptedModel([]) }, store);
    const before = (await store.getHead('s'))!.lastSeq;
    const err = await r2.openSession('s').catch((e: unknown) => e);
    expect(isUnknownAgentError(err)).toBe(true);
    expect(err).toMatchObject({ agentName: 'x', sessionId: 's' });
    expect((await store.getHead('s'))!.lastSeq).toBe(before);
    // asking for an agent the runtime lacks is refused the same way
    expect(isUnknownAgentError(await r2.openSession('t', { agent: 'nobody' }).catch((e: unknown) => e))).toBe(true);
  });

  it('a session live in this runtime is shared only with an open whose agent and resume agree; an unknown agent is refused on that path too', async () => {
    const x = defineAgent({ name: 'x', instructions: 'I am x' });
    const y = defineAgent({ name: 'y', instructions: 'I am y' });
    const runtime = createRuntime({ store: memoryStore(), model: scriptedModel([]), agents: [x, y] });
    cleanups.push(() => runtime.close());
    const first = await runtime.openSession('s', { agent: x, resume: 'manual' });
    // the same options, its name for the value, or options left out: the live session
    expect(await runtime.openSession('s', { agent: 'x', resume: 'manual' })).toBe(first);
    expect(await runtime.openSession('s')).toBe(first);
    const otherAgent = await runtime.openSession('s', { agent: y }).catch((e: unknown) => e);
    expect(isValidationError(otherAgent)).toBe(true);
    expect((otherAgent as Error).message).toMatch(/session s is open in this runtime with agent x, asked for agent y/);
    const otherResume = await runtime.openSession('s', { resume: 'auto' }).catch((e: unknown) => e);
    expect(isValidationError(otherResume)).toBe(true);
    expect((otherResume as Error).message).toMatch(/with resume 'manual', asked for resume 'auto'/);
    expect(isUnknownAgentError(await runtime.openSession('s', { agent: 'nobody' }).catch((e: unknown) => e))).toBe(true);
    // a refused open is no opener: the first opener's close closes the writer
    await first.close();
    await first.close();
    await first.close();
    expect(first.snapshot().status).toBe('closed');
    // a session opened without an agent runs default: asking for x while it is live is refused
    const d = await runtime.openSession('d');
    expect(isValidationError(await runtime.openSession('d', { agent: x }).catch((e: unknown) => e))).toBe(true);
    await d.close();
  });

  it('a log written before agents (no agent in run/start) reads as the default agent', async () => {
    const store = memoryStore();
    const model = scriptedModel(['old', 'new']);
    const rt = createRuntime({ store, model, systemPrompt: 'default prompt' });
    cleanups.push(() => rt.close());
    // an old log: run/start and session/attached without an agent
    const a = await store.attachWriter('old');
    await store.append('old', a.writerEpoch, 1, [
      {
        type: 'session/attached',
        turn: 0,
        step: 0,
        attempt: 0,
        surfaceOp: 'none',
        payload: { sessionInstanceId: 'i', writerEpoch: a.writerEpoch },
      },
      {
        eventId: 'run-open:r0',
        type: 'run/start',
        turn: 1,
        step: 0,
        attempt: 1,
        surfaceOp: 'none',
        payload: { runId: 'r0', attemptId: 'r0', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'x' },
      },
      {
        type: 'run/end',
        turn: 1,
        step: 0,
        attempt: 1,
        surfaceOp: 'none',
        payload: { runId: 'r0', attemptId: 'r0', status: 'completed', outcome: 'final' },
      },
    ]);
    const s = await rt.openSession('old', { agent: 'default' });
    expect((await s.run('hi').result).status).toBe('succeeded');
    expect(model.requests[0]!.messages[0]).toEqual({ role: 'system', content: 'default prompt' });
  });
});
