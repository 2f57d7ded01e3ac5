import { z } from 'zod';
import { agentTool, createRuntime, defineAgent, defineTool, scriptedModel, type EventStore } from '../../src/index.js';

/**
 * A finished three-level tree on `store`: session `s` (run `r`) asks the researcher (call c1),
 * whose child session `s/r/1/c1` asks the checker (call k1, grandchild `s/r/1/c1/answer/1/k1`).
 * Resolves with the runtime's close (which closes `store`).
 */
export async function runAgentTree(store: EventStore): Promise<() => Promise<void>> {
  const ask = (id: string, name: string, input: string) => ({ toolCalls: [{ id, name, arguments: { input } }] });
  const checker = defineAgent({ name: 'checker', instructions: 'c', model: scriptedModel(['checked: hot']) });
  const researcher = defineAgent({
    name: 'researcher',
    instructions: 'r',
    model: scriptedModel([ask('k1', 'checker', 'is tea hot?'), 'tea is hot']),
    tools: [agentTool(checker)],
  });
  const runtime = createRuntime({ store, model: scriptedModel([ask('c1', 'researcher', 'tea?'), 'done']), tools: [agentTool(researcher)] });
  const result = await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' });
  if (result.status !== 'succeeded') {
    await runtime.close();
    throw new Error(`the tree's run ended ${result.status}`);
  }
  return () => runtime.close();
}

/** A `charge` tool that needs approval (a payer agent's: its run suspends on it), recording each run in `ran`. */
export function chargeTool(ran: string[]) {
  return defineTool({
    name: 'charge',
    description: 'charges an amount',
    parameters: z.object({ amount: z.number() }),
    mode: 'exclusive',
    needsApproval: true,
    execute: ({ amount }, ctx) => {
      ran.push(`${ctx.sessionId}:${amount}`);
      return `charged ${amount}`;
    },
  });
}
