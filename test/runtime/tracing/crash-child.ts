/**
 * Child program for test/runtime/tracing.test.ts: a traced run on an LMDB log whose exclusive
 * tool blocks (printing BLOCKING) until the test SIGKILLs the process.
 *
 *   node --import tsx test/runtime/tracing/crash-child.ts <dir>
 */
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel } from '../../../src/index.js';
import { memoryTracing } from './otel.js';

const [path] = process.argv.slice(2) as [string];
const block = defineTool({
  name: 'block',
  description: 'Blocks',
  parameters: z.object({}),
  execute: () => {
    process.stdout.write('BLOCKING\n');
    return new Promise<string>(() => {});
  },
});
const runtime = createRuntime({
  store: lmdbStore({ path }),
  model: scriptedModel([{ toolCalls: [{ id: 'b1', name: 'block', arguments: {} }] }]),
  tools: [block],
  tracing: { tracerProvider: memoryTracing().provider },
});
const session = await runtime.openSession('s1');
await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
