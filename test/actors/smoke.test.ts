import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel } from '../../src/index.js';
import { collect } from '../helpers/drafts.js';

describe('smoke', () => {
  it('runs prompt → tool → final', async () => {
    const store = memoryStore();
    const add = defineTool({
      name: 'add',
      description: 'adds',
      mode: 'parallel',
      parameters: z.object({ a: z.number(), b: z.number() }),
      execute: ({ a, b }) => String(a + b),
    });
    const delivered: string[] = [];
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 1, b: 2 } }] }, 'It is 3.']),
      tools: [add],
      delivery: { deliver: async (f) => void delivered.push(f.content) },
    });
    const s = await runtime.openSession('s1');
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'what is 1+2?' });
    expect(r).toMatchObject({ outcome: 'completed', status: 'succeeded', finalMessage: 'It is 3.' });
    expect(delivered).toEqual(['It is 3.']);
    const events = await collect(store.readEvents('s1'));
    expect(events.map((e) => e.type)).toEqual([
      'session/attached',
      'run/start',
      'user/message',
      'step/start',
      'assistant/message',
      'tool/call',
      'tool/result',
      'step/end',
      'step/start',
      'assistant/message',
      'final/message',
      'step/end',
      'delivery/committed',
      'run/end',
    ]);
    const again = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'what is 1+2?' });
    expect(again.finalMessage).toBe('It is 3.');
    await runtime.close();
  });
});
