import { z } from 'zod';
import { agentTool, createRuntime, defineAgent, lmdbStore, scriptedModel } from 'actorloop';

// Offline: each agent has its own scripted model. Swap in openaiModel(...) or anthropicModel(...) for real ones.
const Report = z.object({ title: z.string(), body: z.string() });
const researcherModel = scriptedModel([(req) => `Notes on ${req.messages.at(-1)?.content}: it matters.`], { loop: true });
const researcher = defineAgent({ name: 'researcher', instructions: 'Research the topic you are given.', model: researcherModel });
const writer = defineAgent({
  name: 'writer',
  instructions: 'Write the report from the notes in the conversation.',
  model: scriptedModel(['{"title":"Tea and coffee","body":"Both matter."}']),
  output: Report,
});
const orchestrator = defineAgent({
  name: 'orchestrator',
  instructions: 'Have both topics researched, then hand off to the writer.',
  tools: [agentTool(researcher, { mode: 'parallel' })], // each call runs a researcher in a child session
  handoffs: [writer], // offered as transfer_to_writer
  model: scriptedModel([
    { toolCalls: ['tea', 'coffee'].map((input, i) => ({ id: `r${i}`, name: 'researcher', arguments: { input } })) },
    { toolCalls: [{ id: 'h1', name: 'transfer_to_writer', arguments: {} }] },
  ]),
});
const runtime = createRuntime({
  store: lmdbStore({ path: process.argv[2] ?? './.actorloop' }),
  model: researcherModel,
  agents: [orchestrator],
});
const session = await runtime.openSession(`report-${Date.now()}`, { agent: orchestrator });
const { status, output } = await session.run('Write a report on tea and coffee.').result;
console.log(status, Report.parse(output).title); // succeeded Tea and coffee — the writer's answer, of its output schema
await runtime.close();
