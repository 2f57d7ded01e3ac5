import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel } from 'actorloop';

const add = defineTool({
  name: 'add',
  description: 'Adds two numbers',
  parameters: z.object({ a: z.number(), b: z.number() }),
  mode: 'parallel', // side-effect free: may run alongside other parallel calls
  execute: ({ a, b }) => String(a + b),
});

// Offline: a scripted model. For a real one: await openaiModelFromEnv({ model: 'gpt-4.1-mini' }).
const model = scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 2, b: 40 } }] }, 'The answer is 42.']);
const runtime = createRuntime({ store: lmdbStore({ path: process.argv[2] ?? './.actorloop' }), model, tools: [add] });
const session = await runtime.openSession(`basic-${Date.now()}`);
const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'What is 2 + 40?' });
console.log(result.outcome, result.finalMessage); // completed The answer is 42.
await runtime.close();
