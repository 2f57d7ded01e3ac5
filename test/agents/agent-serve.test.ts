import { afterEach, describe, expect, it } from 'vitest';
import { agentTool, createRuntime, defineAgent, memoryStore, scriptedModel, type ServeEvent } from '../../src/index.js';
import { logOf } from '../helpers/runtime.js';

// Under runtime.serve a child session is run by its parent's call, in the worker that holds the parent.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('agents under runtime.serve', () => {
  it('the worker holding the parent runs its child; the child is never claimed on its own', async () => {
    const store = memoryStore();
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: scriptedModel(['tea: a drink']) });
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'researcher', arguments: { input: 'tea?' } }] }, 'Tea is a drink.']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    const worker = runtime.serve();
    const events: ServeEvent[] = [];
    worker.events$.subscribe((e) => events.push(e));
    cleanups.push(() => worker.stop());
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'what is tea?' });
    const r = await runtime.waitForResult('s', 'r', { signal: AbortSignal.timeout(60_000) });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Tea is a drink.' });
    expect((await logOf(store, 's/r/1/c1')).some((e) => e.type === 'run/end' && e.payload.status === 'succeeded')).toBe(true);
    const claimed = events.flatMap((e) => (e.type === 'claimed' ? [e.sessionId] : []));
    expect(claimed).toEqual(['s']);
    expect(worker.sessions).not.toContain('s/r/1/c1');
  });
});
