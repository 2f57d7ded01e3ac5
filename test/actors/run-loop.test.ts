import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  defineTool,
  isExecutionBusy,
  isProtocolExhaustedError,
  isProviderError,
  isValidationError,
  scriptedModel,
} from '../../src/index.js';
import { ids, lmdbRuntime, logOf, typesOf } from '../helpers/runtime.js';

const echo = defineTool({
  name: 'echo',
  description: 'echoes',
  mode: 'parallel',
  parameters: z.object({ text: z.string() }),
  execute: ({ text }) => text,
});

describe('the turn loop (real LMDB)', () => {
  it('a plain answer: run/start, user message, one step, final, delivery, run/end', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel(['Hello there.']) });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r).toMatchObject({
      outcome: 'completed',
      status: 'succeeded',
      finalMessage: 'Hello there.',
      steps: 1,
      checkpointCommitted: true,
    });
    const log = await logOf(store, 's');
    expect(typesOf(log)).toEqual([
      'session/attached',
      'run/start',
      'user/message',
      'step/start',
      'assistant/message',
      'final/message',
      'step/end',
      'delivery/committed',
      'run/end',
    ]);
    const start = log[1]!;
    expect(start.payload).toMatchObject({ runEpoch: 1, kind: 'prompt', executionProfileFingerprint: runtime.executionProfileFingerprint });
    expect(runtime.executionProfileFingerprint).toMatch(/^[0-9a-f]{64}$/);
    const assistant = log[4]!;
    expect(assistant.payload.latencyMs).toEqual(expect.any(Number));
    expect(assistant.payload.requestDigest).toMatch(/^[0-9a-f]{64}$/);
  });

  it('tool step then final; tool results carry startedAt/endedAt; a step costs two commits', async () => {
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'pong' } }] }, 'Done.']),
      tools: [echo],
    });
    const s = await runtime.openSession('s');
    const before = store.appends;
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'ping' });
    expect(r.status).toBe('succeeded');
    const log = await logOf(store, 's');
    const result = log.find((e) => e.type === 'tool/result')!;
    expect(result.payload).toMatchObject({ name: 'echo', outcome: { kind: 'completed', content: 'pong' } });
    expect(result.payload.startedAt).toBeLessThanOrEqual(result.payload.endedAt as number);
    const call = log.find((e) => e.type === 'tool/call')!;
    expect(call.seq).toBeLessThan(result.seq);
    expect(call.payload).toMatchObject({ mode: 'parallel', resources: [], idempotencyKey: expect.stringContaining('/') });
    // commits: run/start, (tool step: intent, results), (final step: final), (delivery + run/end)
    expect(store.appends - before).toBe(5);
  });

  it('records chained request digests: equal requests give equal digests, growing ones differ', async () => {
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, 'one', 'two']),
      tools: [echo],
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'x' });
    await s.execute({ kind: 'prompt', ...ids(), message: 'y' });
    const digests = (await logOf(store, 's')).filter((e) => e.type === 'assistant/message').map((e) => e.payload.requestDigest);
    expect(new Set(digests).size).toBe(3);

    // the same conversation replayed in a fresh session yields the same digests
    const { runtime: rt2, store: st2 } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, 'one', 'two']),
      tools: [echo],
    });
    const s2 = await rt2.openSession('s');
    await s2.execute({ kind: 'prompt', runId: 'x1', attemptId: 'x1', message: 'x' });
    const d2 = (await logOf(st2, 's')).filter((e) => e.type === 'assistant/message').map((e) => e.payload.requestDigest);
    expect(d2).toEqual(digests.slice(0, 2));
  });

  it('execute is idempotent per (runId, attemptId), also after reopening', async () => {
    const model = scriptedModel(['first answer']);
    const { runtime, store } = lmdbRuntime({ model });
    const s = await runtime.openSession('s');
    const id = ids();
    const r1 = await s.execute({ kind: 'prompt', ...id, message: 'hi' });
    const r2 = await s.execute({ kind: 'prompt', ...id, message: 'hi' });
    expect(r2).toEqual(JSON.parse(JSON.stringify(r1)));
    expect(model.requests).toHaveLength(1);
    await s.close();
    const again = await runtime.openSession('s');
    expect((await again.execute({ kind: 'prompt', ...id, message: 'hi' })).finalMessage).toBe('first answer');
    expect(model.requests).toHaveLength(1);
    expect(typesOf(await logOf(store, 's')).filter((t) => t === 'run/start')).toHaveLength(1);
  });

  it('a second execute while one runs → ExecutionBusy; bad input → ValidationError', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'slow', delayMs: 100 }, 'next']) });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'a' });
    await expect(s.execute({ kind: 'prompt', ...ids(), message: 'b' })).rejects.toSatisfy(isExecutionBusy);
    expect((await running).status).toBe('succeeded');
    await expect(s.execute({ kind: 'prompt', runId: '', attemptId: 'a', message: 'x' } as never)).rejects.toSatisfy(isValidationError);
    await expect(s.execute({ kind: 'bogus' } as never)).rejects.toSatisfy(isValidationError);
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'c' })).status).toBe('succeeded');
  });

  it('retries retryable provider errors with backoff, logging each failed attempt', async () => {
    const model = scriptedModel([
      { error: { message: 'overloaded', retryable: true, code: 'server' } },
      { error: { message: 'rate limited', retryable: true, code: 'rate_limit' } },
      'finally',
    ]);
    const { runtime, store } = lmdbRuntime({ model, config: { retryBackoffMs: 20 } });
    const s = await runtime.openSession('s');
    const t0 = Date.now();
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r.status).toBe('succeeded');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(55); // 20 + 40 ms of backoff
    const attempts = (await logOf(store, 's')).filter((e) => e.type === 'assistant/attempt');
    expect(attempts.map((a) => a.payload)).toMatchObject([
      { attemptNumber: 1, error: { message: 'overloaded', retryable: true, code: 'server' } },
      { attemptNumber: 2, error: { message: 'rate limited', retryable: true } },
    ]);
    expect(attempts[0]!.payload.requestDigest).toBe(attempts[1]!.payload.requestDigest);
  });

  it('gives up after maxProviderAttempts, and at once on a non-retryable error', async () => {
    const err = { error: { message: 'boom', retryable: true, code: 'server' } };
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([err, err, { error: { message: 'bad key', retryable: false, code: 'auth' } }]),
      config: { maxProviderAttempts: 2, retryBackoffMs: 1 },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r).toMatchObject({ outcome: 'failed', status: 'failed', error: { kind: 'execution' } });
    expect(isProviderError(r.error!.cause)).toBe(true);
    expect(r.error!.cause).toMatchObject({ retryable: true, partialOutput: false, providerCode: 'server' });
    const r2 = await s.execute({ kind: 'prompt', ...ids(), message: 'again' });
    expect(r2.error!.cause).toMatchObject({ retryable: false, providerCode: 'auth' });
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'assistant/attempt')).toHaveLength(3);
    expect(log.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['failed', 'failed']);
  });

  it('rejects bad tool calls as a batch and feeds the errors back; ProtocolExhaustedError past the limit', async () => {
    const model = scriptedModel([
      {
        toolCalls: [
          { id: 'c1', name: 'nope', arguments: {} },
          { id: 'c2', name: 'echo', arguments: { text: 'ok' } },
        ],
      },
      { toolCalls: [{ id: 'c3', name: 'echo', arguments: '{"text": ' }] },
      { toolCalls: [{ id: 'c4', name: 'echo', arguments: { text: 5 } }] },
    ]);
    const { runtime, store } = lmdbRuntime({ model, tools: [echo], config: { maxProtocolCorrections: 2 } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    expect(r.status).toBe('failed');
    expect(isProtocolExhaustedError(r.error!.cause)).toBe(true);
    const rejected = (await logOf(store, 's'))
      .filter((e) => e.type === 'tool/batch-rejected')
      .map((e) => e.payload.issues as { callId: string; message: string }[]);
    expect(rejected).toHaveLength(3);
    expect(rejected[0]!.map((i) => i.callId)).toEqual(['c1', 'c2']);
    expect(rejected[0]![0]!.message).toContain('unknown tool');
    expect(rejected[0]![1]!.message).toContain('not run');
    expect(rejected[1]![0]!.message).toContain('not valid JSON');
    expect(rejected[2]![0]!.message).toContain('schema');
    // the model saw the rejection as tool messages paired with its calls
    const second = model.requests[1]!.messages;
    expect(second.filter((m) => m.role === 'tool').map((m) => m.toolCallId)).toEqual(['c1', 'c2']);
    expect(typesOf(await logOf(store, 's'))).not.toContain('tool/call');
  });

  it('rejects tool calls cut by finish_reason=length', async () => {
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'echo', arguments: { text: 'x' } }], finishReason: 'length' }, 'ok']);
    const { runtime, store } = lmdbRuntime({ model, tools: [echo] });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'hi' })).status).toBe('succeeded');
    const rej = (await logOf(store, 's')).find((e) => e.type === 'tool/batch-rejected')!;
    expect(rej.payload.issues).toMatchObject([{ callId: 'c1', message: expect.stringContaining('cut off') }]);
  });
});
