import { afterEach, describe, expect, it } from 'vitest';
import { isExecutionBusy, scriptedModel, ValidationError } from '../../src/index.js';
import { lmdbRuntime, logOf, sleep } from '../helpers/runtime.js';

// execute: one attempt per (runId, attemptId); a runId names one run; a recorded attempt
// returns its recorded result.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('run ids', () => {
  it('a prompt reusing the runId of an earlier run is refused, so two runs never share a finalMessageId', async () => {
    const delivered: { id: string; content: string }[] = [];
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel(['first answer', 'second answer']),
      delivery: { idempotent: true, deliver: async (f) => void delivered.push({ id: f.finalMessageId, content: f.content }) },
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'one' });
    // an idempotent owner may de-duplicate on finalMessageId alone: a second run named r would collide
    await expect(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a2', message: 'two' })).rejects.toThrow(ValidationError);
    await expect(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a2', message: 'two' })).rejects.toThrow(/run r already exists/);
    // nothing was written for the refused prompt; the recorded attempt still answers
    expect((await logOf(store, 's')).filter((e) => e.type === 'run/start')).toHaveLength(1);
    expect(await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'one' })).toMatchObject({
      status: 'succeeded',
      finalMessage: 'first answer',
    });
    const r2 = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'two' });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'second answer' });
    expect(delivered.map((d) => d.content)).toEqual(['first answer', 'second answer']);
    expect(new Set(delivered.map((d) => d.id)).size).toBe(2);
  });

  it('a prompt reusing a runId from a log written before run-open ids is refused', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel(['again']) });
    // a settled run as the previous version wrote it: its first run/start under run-start:<runId>:<attemptId>
    const { writerEpoch, lastSeq } = await store.attachWriter('s');
    await store.append('s', writerEpoch, lastSeq + 1, [
      {
        eventId: 'run-start:X:a1',
        type: 'run/start',
        turn: 1,
        step: 0,
        attempt: 1,
        surfaceOp: 'none',
        payload: { runId: 'X', attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f' },
      },
      { type: 'user/message', turn: 1, step: 0, attempt: 1, surfaceOp: 'append', payload: { message: { role: 'user', content: 'hi' } } },
      {
        type: 'assistant/message',
        turn: 1,
        step: 1,
        attempt: 1,
        surfaceOp: 'append',
        payload: { message: { role: 'assistant', content: 'hello' }, finishReason: 'stop', latencyMs: 1 },
      },
      {
        eventId: 'run-end:X:a1',
        type: 'run/end',
        turn: 1,
        step: 1,
        attempt: 1,
        surfaceOp: 'none',
        payload: {
          runId: 'X',
          attemptId: 'a1',
          status: 'succeeded',
          outcome: 'completed',
          result: { runId: 'X', attemptId: 'a1', status: 'succeeded', outcome: 'completed' },
        },
      },
    ]);
    const s = await runtime.openSession('s');
    await expect(s.execute({ kind: 'prompt', runId: 'X', attemptId: 'a2', message: 'again' })).rejects.toThrow(ValidationError);
  });
});

describe('recorded attempts', () => {
  it('a recorded attempt executed again while another run is in progress returns its recorded result, not ExecutionBusy', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel(['first answer', { text: 'slow second', delayMs: 300 }]) });
    const s = await runtime.openSession('s');
    const first = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' });
    const second = s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'two' });
    await sleep(50);
    // a retry of r1 (its caller lost the answer) runs nothing, so it need not wait for r2
    expect(await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' })).toEqual(first);
    // the attempt in progress itself, or a new one, is still busy
    await expect(s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'two' })).rejects.toThrow(/busy/i);
    await expect(s.execute({ kind: 'prompt', runId: 'r3', attemptId: 'a1', message: 'three' })).rejects.toThrow(/busy/i);
    expect(await second).toMatchObject({ status: 'succeeded', finalMessage: 'slow second' });
  });
});

describe('ExecutionBusy', () => {
  it('names the run that keeps the session busy, also while that run’s attempt is still being prepared', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'slow', delayMs: 200 }, 'later']) });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    // the second execute comes in the same tick: r1's attempt is being prepared (its log read), not yet running
    const first = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' });
    const preparing = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'two' }).catch((e: unknown) => e);
    expect(isExecutionBusy(preparing) && [preparing.activeRunId, preparing.message]).toEqual(['r1', 'session s is busy executing run r1']);
    await sleep(50);
    const running = await s.execute({ kind: 'prompt', runId: 'r3', attemptId: 'a1', message: 'three' }).catch((e: unknown) => e);
    expect(isExecutionBusy(running) && running.activeRunId).toBe('r1');
    expect(await first).toMatchObject({ status: 'succeeded' });
  });
});
