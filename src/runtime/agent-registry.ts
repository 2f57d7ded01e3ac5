import { ValidationError } from '../contracts/errors.js';
import { z } from 'zod';
import type { LoopBudget } from '../contracts/config.js';
import type { Message } from '../contracts/message.js';
import type { ModelProvider } from '../contracts/model.js';
import { outputSpec, withOutput, type OutputSpec } from '../actors/final-output.js';
import { canonicalJson } from '../persistence/codec.js';
import { estimateTokens, sha256 } from '../persistence/surface.js';
import { noModel, type ResolvedRuntimeOptions } from './options.js';
import { toolSets, type ToolSet } from './tool-set.js';
import { defineTool, type AnyTool } from '../tools/define-tool.js';
import { agentNameOf, DEFAULT_AGENT, isAgent, type Agent } from '../tools/define-agent.js';
import { agentMarkOf, markTool, type AgentMark } from '../tools/agent-marks.js';

/** One agent as a runtime runs it: everything a session's services take from it. */
export interface AgentProfile {
  readonly name: string;
  readonly model: ModelProvider;
  /** The system prompt: the agent's instructions (the runtime's `systemPrompt` for `default`). */
  readonly systemPrompt?: string;
  /** System prompt and (for `default`) the bootstrap messages, before the surface. */
  readonly prefix: Message[];
  readonly prefixDigest: string;
  readonly prefixTokens: number;
  /** The tools an attempt starting now is offered (its own, its transfer tools, askUser) and its fingerprint. */
  readonly toolSet: () => ToolSet;
  readonly output?: z.ZodType;
  readonly outputSpec?: OutputSpec;
  readonly budget: LoopBudget;
  readonly approvalFor: readonly string[];
  /** Its transfer tools' names and the agents they hand off to. */
  readonly handoffs: ReadonlyMap<string, string>;
}

/** The agents of one runtime, by name (outside names: a Map). */
export class AgentRegistry {
  constructor(
    private readonly profiles: ReadonlyMap<string, AgentProfile>,
    /** Every agent value the runtime knows, by name (a child session's agent is found here). */
    readonly agents: ReadonlyMap<string, Agent>,
  ) {}

  get(name: string): AgentProfile | undefined {
    return this.profiles.get(name);
  }

  get names(): string[] {
    return [...this.profiles.keys()];
  }

  /** The execution-profile fingerprint of an attempt of agent `name` starting now with its own output schema. */
  fingerprint(name: string): string {
    const p = this.profiles.get(name)!;
    return withOutput(p.toolSet().fingerprint, p.outputSpec);
  }
}

const invalid = (message: string): never => {
  throw new ValidationError('createRuntime', [{ path: ['agents'], message: message }]);
};

/** The `transfer_to_<name>` tool of a handoff to `target`. */
export function transferTool(target: string): AnyTool {
  return markTool(
    defineTool({
      name: `transfer_to_${target}`,
      description: `Hands the conversation over to the ${target} agent, which answers from the next step on.`,
      parameters: z.strictObject({}),
      mode: 'parallel',
      execute: () => `Transferred to ${target}.`,
    }),
    { kind: 'handoff', to: target },
  );
}

/**
 * Every agent a runtime runs: `default` (its own model, tools, systemPrompt, output, budget,
 * approvalFor) and each agent given in `agents`, or reachable from one (a handoff target, an
 * agentTool's agent). Names are unique: two different agents of one name are refused.
 */
export function agentRegistry(
  o: ResolvedRuntimeOptions,
  given: readonly Agent[],
  extraTools: readonly AnyTool[],
  bind: (tool: AnyTool, mark: Extract<AgentMark, { kind: 'agent' }>) => AnyTool,
): AgentRegistry {
  // an agentTool runs its agent in this runtime: each is bound once, wherever it is offered
  const bound = new Map<AnyTool, AnyTool>();
  const withBound = (tools: readonly AnyTool[]): AnyTool[] =>
    tools.map((t) => {
      const m = agentMarkOf(t);
      if (m?.kind !== 'agent') return t;
      let b = bound.get(t);
      if (!b) bound.set(t, (b = bind(t, m)));
      return b;
    });
  const agents = new Map<string, Agent>();
  const visit = (a: Agent): void => {
    const known = agents.get(a.name);
    if (known === a) return;
    if (known || a.name === DEFAULT_AGENT)
      invalid(
        `two agents are named ${a.name}${a.name === DEFAULT_AGENT ? ' (the runtime’s own model and tools are the agent default)' : ''}`,
      );
    agents.set(a.name, a);
    if (a.budget?.maxCost !== undefined && !o.pricing)
      invalid(
        `${a.name}'s budget.maxCost needs the runtime's pricing function to price model calls; without one it could never be reached`,
      );
    for (const h of a.handoffs) if (isAgent(h)) visit(h);
    for (const t of [...a.tools, ...o.tools]) {
      const m = agentMarkOf(t);
      if (m?.kind !== 'agent') continue;
      // `{ ...agentTool(a), execute }` keeps the mark: its calls would run the agent, never that execute
      if (t.execute !== m.standIn)
        invalid(`tool ${t.name} runs the ${m.agent.name} agent (an agentTool): its calls run the agent, not an execute of yours`);
      visit(m.agent);
    }
  };
  for (const t of o.tools) {
    const m = agentMarkOf(t);
    if (m?.kind === 'agent') visit(m.agent);
  }
  for (const a of given) visit(a);
  const profiles = new Map<string, AgentProfile>();
  const common = { config: o.config };
  profiles.set(
    DEFAULT_AGENT,
    profileOf(DEFAULT_AGENT, {
      model: o.model ?? noModel,
      systemPrompt: o.systemPrompt,
      bootstrap: o.bootstrapMessages,
      tools: withBound([...o.tools, ...extraTools]),
      output: o.output,
      budget: o.budget,
      approvalFor: o.approvalFor,
      handoffs: [],
      common,
    }),
  );
  for (const a of agents.values()) {
    const handoffs = a.handoffs.map(agentNameOf);
    for (const h of handoffs) if (h !== DEFAULT_AGENT && !agents.has(h)) invalid(`${a.name} hands off to ${h}, which is not defined`);
    if (new Set(handoffs).size !== handoffs.length) invalid(`${a.name} lists a handoff twice`);
    profiles.set(
      a.name,
      profileOf(a.name, {
        model: a.model ?? o.model ?? noModel,
        systemPrompt: a.instructions,
        bootstrap: [],
        tools: withBound([...a.tools, ...handoffs.map(transferTool), ...extraTools]),
        output: a.output,
        budget: a.budget ?? o.budget,
        approvalFor: a.approvalFor,
        handoffs,
        common,
      }),
    );
  }
  return new AgentRegistry(profiles, agents);
}

interface ProfileParts {
  model: ModelProvider;
  systemPrompt: string | undefined;
  bootstrap: Message[];
  tools: AnyTool[];
  output: z.ZodType | undefined;
  budget: LoopBudget;
  approvalFor: readonly string[];
  handoffs: readonly string[];
  common: Record<string, unknown>;
}

function profileOf(name: string, p: ProfileParts): AgentProfile {
  const names = p.tools.filter((t) => !t.list).map((t) => t.name);
  if (new Set(names).size !== names.length) invalid(`agent ${name} is offered two tools of one name`);
  const prefix: Message[] = [
    ...(p.systemPrompt !== undefined ? [{ role: 'system' as const, content: p.systemPrompt }] : []),
    ...p.bootstrap,
  ];
  const outputSpecOf = p.output ? outputSpec(p.output, `createRuntime: output of agent ${name}`) : undefined;
  return {
    name,
    model: p.model,
    ...(p.systemPrompt !== undefined ? { systemPrompt: p.systemPrompt } : {}),
    prefix,
    prefixDigest: sha256(canonicalJson(prefix)),
    prefixTokens: prefix.reduce((n, m) => n + estimateTokens(m), 0),
    toolSet: toolSets(p.tools, {
      agent: name,
      // a runtime made without a model (one that only submits and reads) has none in its profile
      modelId: p.model === noModel ? null : p.model.modelId,
      systemPrompt: p.systemPrompt ?? null,
      bootstrapMessages: p.bootstrap,
      budget: p.budget,
      ...p.common,
    }),
    ...(p.output ? { output: p.output, outputSpec: outputSpecOf } : {}),
    budget: p.budget,
    approvalFor: p.approvalFor,
    handoffs: new Map(p.handoffs.map((h) => [`transfer_to_${h}`, h])),
  };
}
