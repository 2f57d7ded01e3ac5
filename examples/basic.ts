import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel } from 'actorloop';

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const slowAdd = async ({ a, b }: { a: number; b: number }) => (console.log(`adding ${a} + ${b}…`), await wait(3000), `${a + b}`);
const add = defineTool({ name: 'add', description: 'a + b', parameters: z.object({ a: z.number(), b: z.number() }), execute: slowAdd });
const call = { toolCalls: [{ name: 'add', arguments: { a: 2, b: 40 } }] }; // offline: a scripted model (or openaiModelFromEnv)
const model = scriptedModel([(r) => (r.messages.at(-1)?.role === 'tool' ? 'The answer is 42.\n' : call)], { loop: true });
const runtime = createRuntime({ store: lmdbStore({ path: process.argv[2] ?? './.actorloop' }), model, tools: [add] });
const session = await runtime.openSession('readme'); // a fixed id: kill it mid-run, run it again, and the run finishes first
const run = session.run('What is 2 + 40?');
for await (const text of run.textStream) process.stdout.write(text);
const { status, recovered } = await run.result;
console.log(`${status}${recovered ? ` (interrupted run finished first; not re-run: ${recovered.uncertainCalls.map((c) => c.name)})` : ''}`);
await runtime.close();
