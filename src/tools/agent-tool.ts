import { ValidationError } from '../contracts/errors.js';
import { z } from 'zod';
import { parseInput } from '../contracts/validate.js';
import { markTool } from './agent-marks.js';
import { isAgent, type Agent } from './define-agent.js';
import { defineTool, type AnyTool } from './define-tool.js';

const AgentToolOptions = z.strictObject({
  name: z
    .string()
    .regex(/^[a-zA-Z0-9_-]{1,64}$/, 'letters, digits, _ and -, at most 64')
    .optional(),
  description: z.string().optional(),
  parameters: z.custom<z.ZodType>((v) => v instanceof z.ZodType, 'a zod schema').optional(),
  /** `parallel`: calls of one step run concurrently; `exclusive` (default): one at a time, in order. */
  mode: z.enum(['parallel', 'exclusive']).optional(),
});
export type AgentToolOptions = z.input<typeof AgentToolOptions>;

/** The parameters of an agentTool without its own: the child's prompt. */
export const AgentInput = z.object({ input: z.string().describe('What to ask the agent') });
export type AgentInput = z.infer<typeof AgentInput>;

/**
 * A tool that runs `agent` as a sub-agent (docs/agents.md): each call runs it in a child session
 * of its own log (id derived from the call, the parent call recorded), and the child's final
 * answer — its structured `output` when it has one — is the call's result. Its arguments are
 * `{ input }` (the child's prompt) unless `parameters` is given (then the prompt is the arguments
 * as JSON). A call whose result was not committed when its process stopped is resumed, never
 * uncertain: the child's committed answer is taken, or its open run continued. Spread into
 * defineTool with other options (`timeoutMs`, `needsApproval`, …) it stays an agent tool.
 * @example
 * const researcher = defineAgent({ name: 'researcher', instructions: 'Find facts.', tools: [search] })
 * const runtime = createRuntime({ model, tools: [agentTool(researcher, { mode: 'parallel' })] })
 */
export function agentTool(agent: Agent, options: AgentToolOptions = {}): AnyTool {
  if (!isAgent(agent)) throw new ValidationError('agentTool', [{ path: ['agent'], message: 'an agent made with defineAgent' }]);
  const o = parseInput(AgentToolOptions, options, 'agentTool: options');
  const standIn = (): never => {
    throw new Error(`agentTool ${agent.name}: runs only in a runtime (createRuntime binds it)`);
  };
  const tool = defineTool({
    name: o.name ?? agent.name,
    description: o.description ?? `Asks the ${agent.name} agent and returns its answer. Its instructions: ${agent.instructions}`,
    parameters: o.parameters ?? AgentInput,
    mode: o.mode ?? 'exclusive',
    execute: standIn,
  });
  return markTool({ ...tool, resumable: true }, { kind: 'agent', agent, standIn });
}
