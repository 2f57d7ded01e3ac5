// A scripted agent in an app that installed the actorloop tarball (test/packaging/install.test.ts).
import OpenAI from 'openai';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, openaiModel, scriptedModel, ValidationError } from 'actorloop';

const add = defineTool({
  name: 'add',
  description: 'Adds two numbers',
  parameters: z.object({ a: z.number(), b: z.number() }),
  mode: 'parallel',
  execute: ({ a, b }) => String(a + b),
});
// the OpenAI adapter takes the app's own SDK client (constructing it calls nothing)
openaiModel({ client: new OpenAI({ apiKey: 'sk-test', baseURL: 'http://127.0.0.1:9/v1' }), model: 'gpt-4.1-mini' });
try {
  openaiModel({ client: {}, model: 'gpt-4.1-mini' });
} catch (e) {
  if (!(e instanceof ValidationError)) throw e;
}
const model = scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 2, b: 40 } }] }, 'The answer is 42.']);
const runtime = createRuntime({ store: lmdbStore({ path: process.argv[2] }), model, tools: [add] });
const session = await runtime.openSession('app-1');
const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'What is 2 + 40?' });
console.log(result.outcome, result.finalMessage);
await runtime.close();
