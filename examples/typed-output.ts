import { z } from 'zod';
import { createRuntime, lmdbStore, scriptedModel } from 'actorloop';

const Invoice = z.object({ number: z.string(), total: z.number(), lines: z.array(z.object({ item: z.string(), amount: z.number() })) });
// Offline: the scripted model answers with JSON text. openaiModel and anthropicModel use their native structured output.
const model = scriptedModel(['{"number":"INV-7","total":12.5,"lines":[{"item":"tea","amount":12.5}]}']);
const runtime = createRuntime({ store: lmdbStore({ path: process.argv[2] ?? './.actorloop' }), model });
const session = await runtime.openSession(`invoice-${Date.now()}`);
const { output } = await session.run('Extract the invoice: INV-7, tea 12.50', { output: Invoice }).result;
console.log(output?.number, output?.total, output?.lines[0]?.item); // INV-7 12.5 tea — typed as z.infer<typeof Invoice>
await runtime.close();
