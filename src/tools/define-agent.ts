import { ValidationError } from '../contracts/errors.js';
import { z } from 'zod';
import { LoopBudget } from '../contracts/config.js';
import type { ModelProvider } from '../contracts/model.js';
import { parseInput } from '../contracts/validate.js';
import type { AnyTool } from './tool-definition.js';

/** The most characters an agent's name has: `transfer_to_<name>` fits a provider's 64-character tool names. */
export const MAX_AGENT_NAME = 52;

/** The name of the agent the runtime's own `model`, `tools` and `systemPrompt` make. */
export const DEFAULT_AGENT = 'default';

/**
 * An agent (DESIGN §10): what a session runs — its instructions (the system prompt), model,
 * tools, output schema, budget, approvals and the agents it may hand the session off to.
 */
export interface Agent<TOut = unknown> {
  readonly kind: 'agent';
  readonly name: string;
  readonly instructions: string;
  /** The runtime's `model` when not given. */
  readonly model?: ModelProvider;
  readonly tools: readonly AnyTool[];
  /** The final answer's schema (docs/typed-output.md) of the runs this agent starts. */
  readonly output?: z.ZodType<TOut>;
  /** The runtime's `budget` when not given. */
  readonly budget?: z.output<typeof LoopBudget>;
  readonly approvalFor: readonly string[];
  /** Agents (or agent names of the runtime) offered as `transfer_to_<name>` tools. */
  readonly handoffs: readonly (Agent | string)[];
}

const isAgent = (v: unknown): v is Agent =>
  typeof v === 'object' && v !== null && (v as Agent).kind === 'agent' && typeof (v as Agent).name === 'string';

export const AgentName = z
  .string()
  .regex(/^[a-zA-Z0-9_-]+$/, 'letters, digits, _ and -')
  .max(MAX_AGENT_NAME, `at most ${MAX_AGENT_NAME} characters (transfer_to_<name> must fit a provider's 64-character tool names)`);

/** An agent value, or the name of one the runtime defines. */
export const AgentRef = z.union([AgentName, z.custom<Agent>(isAgent, 'an agent made with defineAgent')]);

/** Unknown keys are refused: a misspelt option (instruction) must not quietly become its default. */
const AgentOptions = z.strictObject({
  name: AgentName,
  instructions: z.string(),
  model: z
    .custom<ModelProvider>((v) => typeof v === 'object' && v !== null && typeof (v as ModelProvider).call === 'function', 'a ModelProvider')
    .optional(),
  tools: z
    .array(z.custom<AnyTool>((v) => typeof v === 'object' && v !== null && typeof (v as AnyTool).execute === 'function', 'a tool'))
    .default([])
    .refine((ts) => new Set(ts.map((t) => t.name)).size === ts.length, 'tool names must be unique'),
  output: z.custom<z.ZodType>((v) => v instanceof z.ZodType, 'a zod schema (e.g. z.object({ … }))').optional(),
  budget: LoopBudget.optional(),
  approvalFor: z.array(z.string()).default([]),
  handoffs: z.array(AgentRef).default([]),
});
export type AgentOptions<S extends z.ZodType | undefined = undefined> = Omit<z.input<typeof AgentOptions>, 'output'> & { output?: S };

/**
 * Defines an agent: a value `createRuntime({ agents })`, `openSession(id, { agent })`,
 * `agentTool` and other agents' `handoffs` take. Its name is unique in a runtime (letters,
 * digits, `_`, `-`; at most 52 characters) and is what a session's log records.
 * @example
 * const writer = defineAgent({ name: 'writer', instructions: 'Write the report from the notes.' })
 * const lead = defineAgent({ name: 'lead', instructions: 'Research, then hand off.', handoffs: [writer] })
 */
export function defineAgent<S extends z.ZodType | undefined = undefined>(
  options: AgentOptions<S>,
): Agent<S extends z.ZodType ? z.output<S> : unknown> {
  const o = parseInput(AgentOptions, options, 'defineAgent');
  for (const t of o.tools)
    if (t.name.startsWith('transfer_to_'))
      throw new ValidationError('defineAgent', [
        { path: ['tools'], message: `${t.name}: names starting transfer_to_ are the handoff tools` },
      ]);
  return Object.freeze({
    kind: 'agent' as const,
    name: o.name,
    instructions: o.instructions,
    ...(o.model ? { model: o.model } : {}),
    tools: Object.freeze([...o.tools]),
    ...(o.output ? { output: o.output } : {}),
    ...(o.budget ? { budget: o.budget } : {}),
    approvalFor: Object.freeze([...o.approvalFor]),
    handoffs: Object.freeze([...o.handoffs]),
  }) as Agent<S extends z.ZodType ? z.output<S> : unknown>;
}

/** Whether `v` is an agent value (what defineAgent returns). */
export { isAgent };

/** The name of an agent value or name. */
export const agentNameOf = (ref: Agent | string): string => (typeof ref === 'string' ? ref : ref.name);
