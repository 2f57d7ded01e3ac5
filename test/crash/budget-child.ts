/**
 * Child program for test/crash/budget-sigkill.test.ts: an agent under a `maxCost` budget on an
 * LMDB log, in a real process that SIGKILLs itself in the middle of a model call's stream.
 *
 *   node --import tsx test/crash/budget-child.ts <phase: first|recover> <dir>
 *
 * first: the first model call fails after output (retryable) and its retry asks for `tick`; the
 * second call streams a delta and the process is killed mid-stream. recover: opens the same log
 * and continues the run (the model answers). Protocol lines: `RESULT <json>`, `KILL <what>`, `DONE`, `ERROR <message>`.
 */
import { join } from 'node:path';
import { z } from 'zod';
import { createRuntime } from '../../src/runtime/runtime.js';
import { ProviderError } from '../../src/contracts/errors.js';
import type { ModelProvider } from '../../src/contracts/model.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { defineTool } from '../../src/tools/define-tool.js';
import { runChild, say } from './child-util.js';
import { BUDGET_CHILD_OPTIONS } from './budget-pricing.js';

const [phase, dir] = process.argv.slice(2) as [string, string];

let failed = false;
const model: ModelProvider = {
  modelId: 'budget-model',
  async call(req, onEvent) {
    const n = req.messages.filter((m) => m.role === 'assistant').length;
    const usage = { inputTokens: 10, outputTokens: 5 };
    if (n === 0 && !failed) {
      failed = true;
      onEvent({ type: 'text_delta', text: 'thinking…' });
      throw new ProviderError('the connection dropped after output', { retryable: true, code: 'server', partialOutput: true });
    }
    if (n === 0)
      return {
        message: { role: 'assistant', content: '', toolCalls: [{ id: 't1', name: 'tick', arguments: '{}' }] },
        usage,
        finishReason: 'tool_calls',
      };
    if (phase === 'first') {
      onEvent({ type: 'text_delta', text: 'half an ans' });
      say('KILL mid-stream');
      process.kill(process.pid, 'SIGKILL');
      for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
    }
    return { message: { role: 'assistant', content: 'done' }, usage, finishReason: 'stop' };
  },
};

async function main(): Promise<void> {
  const tick = defineTool({ name: 'tick', description: 'ticks', mode: 'parallel', parameters: z.object({}), execute: () => 'ticked' });
  const runtime = createRuntime({ store: lmdbStore({ path: join(dir, 'db') }), model, tools: [tick], ...BUDGET_CHILD_OPTIONS });
  const session = await runtime.openSession('s');
  const r =
    phase === 'first'
      ? await session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'tick, then answer' })
      : await session.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
  say(`RESULT ${JSON.stringify({ status: r.status, cost: r.cost, spending: r.spending, ...(r.error ? { error: r.error.message } : {}) })}`);
  await runtime.close();
  say('DONE');
}

runChild(main);
