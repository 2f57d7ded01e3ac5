// npx tsx examples/agents.ts [data dir] [--inspect]   (--inspect: prints the tree of actors the runtime's inspect saw)
import { z } from 'zod';
import { agentTool, createRuntime, defineAgent, lmdbStore, scriptedModel } from 'actorloop';
import { stateTrace } from './state-trace.js';

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
const args = process.argv.slice(2);
const trace = args.includes('--inspect') ? stateTrace() : undefined;
const runtime = createRuntime({
  store: lmdbStore({ path: args.find((a) => !a.startsWith('--')) ?? './.actorloop' }),
  model: researcherModel,
  agents: [orchestrator],
  ...(trace ? { inspect: trace.inspect } : {}), // each researcher's session shows under the tool call that runs it
});
const session = await runtime.openSession(`report-${Date.now()}`, { agent: orchestrator });
const { status, output } = await session.run('Write a report on tea and coffee.').result;
console.log(status, Report.parse(output).title); // succeeded Tea and coffee — the writer's answer, of its output schema
await runtime.close();
for (const line of trace?.tree() ?? []) console.log(line);
