import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, type ModelProvider, type ModelRequest } from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { ids } from '../helpers/runtime.js';

const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'ok' });

/** A model answering two tool steps and a final one; `leak` leaves an abort listener per request, as SDKs do. */
function recordingModel(
  leak: boolean,
  onCall?: (req: ModelRequest, n: number) => Promise<void>,
): ModelProvider & { signals: AbortSignal[] } {
  const signals: AbortSignal[] = [];
  return {
    modelId: 'recording',
    signals,
    async call(req) {
      signals.push(req.signal);
      if (leak) req.signal.addEventListener('abort', () => {});
      await onCall?.(req, signals.length);
      if (req.signal.aborted) throw req.signal.reason;
      return signals.length < 3
        ? {
            message: { role: 'assistant', content: '', toolCalls: [{ id: `c${signals.length}`, name: 'echo', arguments: '{}' }] },
            finishReason: 'tool_calls',
          }
        : { message: { role: 'assistant', content: 'done' }, finishReason: 'stop' };
    },
  };
}

describe('the model step signal', () => {
  it('is a new signal for each step when the provider left a listener on the last one', async () => {
    const model = recordingModel(true);
    const runtime = createRuntime({ store: memoryStore(), model, tools: [echo] });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    expect(new Set(model.signals).size).toBe(3);
    await runtime.close();
  });

  it("is the model call actor's own: one per step, never aborted by the step ending", async () => {
    const model = recordingModel(false);
    const runtime = createRuntime({ store: memoryStore(), model, tools: [echo] });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    expect(new Set(model.signals).size).toBe(3);
    expect(model.signals.some((x) => x.aborted)).toBe(false);
    await runtime.close();
  });

  it.each([true, false])('aborts the step under way on requestCancel (provider leaves listeners: %s)', async (leak) => {
    const inCall = deferred<AbortSignal>();
    const model = recordingModel(leak, (req, n) => {
      if (n < 2) return Promise.resolve();
      inCall.resolve(req.signal);
      return new Promise<void>((resolve) => req.signal.addEventListener('abort', () => resolve(), { once: true }));
    });
    const runtime = createRuntime({ store: memoryStore(), model, tools: [echo] });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const signal = await inCall.promise;
    await s.requestCancel();
    expect(signal.aborted).toBe(true);
    expect((await running).status).toBe('cancelled');
    await runtime.close();
  });
});
