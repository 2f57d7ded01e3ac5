import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel } from 'actorloop';

const parameters = z.object({ city: z.string() });
const weather = defineTool({ name: 'weather', description: 'The weather now', parameters, execute: ({ city }) => ({ city, celsius: 21 }) });
const model = scriptedModel([{ toolCalls: [{ name: 'weather', arguments: { city: 'Oslo' } }] }, 'It is 21 °C in Oslo.']);
const runtime = createRuntime({ store: lmdbStore({ path: process.argv[2] ?? './.actorloop' }), model, tools: [weather] });
const session = await runtime.openSession(`streaming-${Date.now()}`);
const run = session.run('How warm is it in Oslo?'); // returns at once; ids are generated
for await (const text of run.textStream) process.stdout.write(text);
const result = await run.result;
console.log(`\n${result.status} in ${result.steps} steps`); // succeeded in 2 steps
await runtime.close();
