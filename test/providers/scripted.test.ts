import { contentText } from '../../src/contracts/content.js';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, scriptedModel } from '../../src/index.js';
import { ids, lmdbRuntime } from '../helpers/runtime.js';

// scriptedModel, the offline ModelProvider.

describe('scriptedModel', () => {
  it('scriptedModel gives tool calls ids unique within a run, also after a compaction shrank the messages', async () => {
    const keys: string[] = [];
    let n = 0;
    const t = defineTool({
      name: 't',
      description: '',
      parameters: z.object({}),
      mode: 'parallel',
      execute: (_a, ctx) => {
        keys.push(ctx.idempotencyKey);
        n++;
        return n === 3 ? 'y'.repeat(3200) : 'ok'; // the first call of run 2 returns a big result: compaction before its next step
      },
    });
    const call = { toolCalls: [{ name: 't', arguments: {} }] };
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 't', arguments: {} },
          { name: 't', arguments: {} },
        ],
      },
      'done one',
      call,
      'SUMMARY',
      call,
      call,
      'end',
    ]);
    const { runtime } = lmdbRuntime({ model, tools: [t], config: { contextWindow: 1500, outputReserve: 200 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'x'.repeat(2000) });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    expect(model.requests.some((q) => contentText(q.messages[0]?.content ?? '').includes('Summarise'))).toBe(true); // a compaction happened
    // run 2 gets call_6_0, call_4_0, then call_6_0 again: the same idempotencyKey for two different calls
    const run2 = keys.slice(2);
    expect(new Set(run2).size).toBe(run2.length);
  });
});
