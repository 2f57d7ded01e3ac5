import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, isCapacityError, scriptedModel } from '../../src/index.js';
import { ids, lmdbRuntime, logOf, sleep, typesOf } from '../helpers/runtime.js';

const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({ t: z.string() }), execute: ({ t }) => t });
const loopModel = () => scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'again' } }], usage: { inputTokens: 100, outputTokens: 50 } }], { loop: true });

describe('verification, delivery and budgets (real LMDB)', () => {
  it('a verifier rejection is recorded, fed back, and counted as a recovery', async () => {
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'bad' } }] }, { toolCalls: [{ name: 'echo', arguments: { t: 'good' } }] }, 'ok']),
      tools: [echo],
      verifier: (name, outcome) => (name === 'echo' && outcome.kind === 'completed' && outcome.content === 'bad' ? 'content must not be bad' : undefined),
    });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    const rej = (await logOf(store, 's')).filter((e) => e.type === 'verification/rejected');
    expect(rej).toHaveLength(1);
    expect(rej[0]!.payload).toMatchObject({ target: 'tool', reason: 'content must not be bad', message: { role: 'user' } });
  });

  it('finalVerifier rejections loop back to the model; past maxRecoveries the run ends budget_exhausted', async () => {
    const model = scriptedModel(['draft 1', 'draft 2', 'final']);
    const { runtime, store } = lmdbRuntime({ model, finalVerifier: (c) => (c.startsWith('draft') ? 'not final yet' : undefined) });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'final' });
    expect(model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'user', content: expect.stringContaining('not final yet') });
    expect((await logOf(store, 's')).filter((e) => e.type === 'verification/rejected')).toHaveLength(2);

    const { runtime: rt2 } = lmdbRuntime({ model: scriptedModel(['draft'], { loop: true }), finalVerifier: () => 'never good', budget: { maxRecoveries: 2 } });
    const s2 = await rt2.openSession('s');
    expect(await s2.execute({ kind: 'prompt', ...ids(), message: 'go' })).toMatchObject({ status: 'budget_exhausted', outcome: 'incomplete', budget: 'maxRecoveries' });
  });

  it('final/message is committed before delivery; the owner receives finalMessageId', async () => {
    let seenInLog: string[] = [];
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel(['answer']),
      delivery: {
        deliver: async (f) => {
          seenInLog = typesOf(await logOf(store, 's'));
          expect(f).toMatchObject({ sessionId: 's', content: 'answer', turn: 1, step: 1, finalMessageId: expect.any(String) });
        },
      },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(seenInLog).toContain('final/message');
    expect(seenInLog).not.toContain('delivery/committed');
    const log = await logOf(store, 's');
    const fm = log.find((e) => e.type === 'final/message')!;
    expect(log.find((e) => e.type === 'delivery/committed')!.payload.finalMessageId).toBe(fm.payload.finalMessageId);
    expect(r.finalMessageId).toBe(fm.payload.finalMessageId);
  });

  it('a throwing delivery owner → delivery/unknown, status delivery_unknown, error kind finalization', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel(['answer']), delivery: { deliver: async () => { throw new Error('webhook down'); } } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ outcome: 'failed', status: 'delivery_unknown', error: { kind: 'finalization', message: expect.stringContaining('webhook down') } });
    const log = await logOf(store, 's');
    expect(typesOf(log).slice(-2)).toEqual(['delivery/unknown', 'run/end']);
  });

  it.each([
    ['maxSteps', { maxSteps: 3 }, 3],
    ['maxToolCalls', { maxToolCalls: 2 }, 2],
    ['maxOutputTokens', { maxOutputTokens: 120 }, 3],
    ['maxCost', { maxCost: '0.25' }, 3],
  ] as const)('budget %s ends the run budget_exhausted, naming it', async (name, budget, steps) => {
    const { runtime, store } = lmdbRuntime({ model: loopModel(), tools: [echo], budget, pricing: () => '0.1' });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ outcome: 'incomplete', status: 'budget_exhausted', budget: name, steps });
    const end = (await logOf(store, 's')).at(-1)!;
    expect(end).toMatchObject({ type: 'run/end', payload: { status: 'budget_exhausted', result: { budget: name } } });
  });

  it('budget maxDurationMs', async () => {
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (await sleep(30), 'ok') });
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }], { loop: true }), tools: [slow], budget: { maxDurationMs: 50 } });
    const s = await runtime.openSession('s');
    expect(await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).toMatchObject({ status: 'budget_exhausted', budget: 'maxDurationMs' });
  });

  it('compacts with the model when the surface outgrows the window; loadSurface then starts at the epoch', async () => {
    const big = 'x'.repeat(2000); // ~500 tokens each
    const model = scriptedModel([big, big, 'SUMMARY', 'after compaction']);
    const { runtime, store } = lmdbRuntime({ model, config: { contextWindow: 1500, outputReserve: 200 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: big });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'short' });
    expect(r.finalMessage).toBe(big);
    const r3 = await s.execute({ kind: 'prompt', ...ids(), message: 'third' });
    expect(r3.finalMessage).toBe('after compaction');
    const compactionReq = model.requests[2]!;
    expect(compactionReq.messages[0]!.content).toContain('Summarise the conversation');
    const log = await logOf(store, 's');
    const comp = log.find((e) => e.type === 'compaction')!;
    expect(comp).toMatchObject({ surfaceOp: 'epoch', payload: { summary: { content: expect.stringContaining('SUMMARY') } } });
    const surface = await store.loadSurface('s');
    expect(surface[0]!.seq).toBe(comp.seq);
    expect(model.requests[3]!.messages.some((m) => m.content.includes('SUMMARY'))).toBe(true);
    expect(model.requests[3]!.messages.some((m) => m.content === big)).toBe(false);
    // the current run's prompt survives compaction, after the summary
    expect(model.requests[3]!.messages.map((m) => m.content).slice(-1)).toEqual(['third']);
    expect(surface.map((e) => e.type)).toEqual(['compaction', 'user/message', 'assistant/message']);
  });

  it('CapacityError when the context still does not fit after compaction', async () => {
    const model = scriptedModel(['ok', 'SUMMARY']);
    const { runtime, store } = lmdbRuntime({ model, config: { contextWindow: 300, outputReserve: 100 } });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'small' })).status).toBe('succeeded');
    // the new prompt alone is too large: compacting the older part cannot help
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'y'.repeat(4000) });
    expect(r.status).toBe('failed');
    expect(isCapacityError(r.error!.cause)).toBe(true);
    expect(model.requests).toHaveLength(2); // one answer + one compaction call
    expect(typesOf(await logOf(store, 's'))).toContain('compaction');
  });

  it('turnContexts holds a frozen context per run', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel(['a', 'b']), systemPrompt: 'be brief', tools: [echo] });
    const s = await runtime.openSession('s');
    const id = ids();
    await s.execute({ kind: 'prompt', ...id, message: 'q1' });
    const tc = s.turnContexts.get(id.runId)!;
    expect(tc).toMatchObject({ modelId: 'scripted', systemPrompt: 'be brief', tools: ['echo'], policyRevision: runtime.executionProfileFingerprint });
    expect(tc.messages.map((m) => m.content)).toEqual(['be brief', 'q1']);
    expect(Object.isFrozen(tc)).toBe(true);
  });
});
