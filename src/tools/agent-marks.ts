import type { AnyTool } from './define-tool.js';
import type { Agent } from './define-agent.js';

/** What a tool the agents module made stands for: a handoff to an agent, or a sub-agent call. */
export type AgentMark = { kind: 'handoff'; to: string } | { kind: 'agent'; agent: Agent; ownParameters: boolean };

const marks = new WeakMap<AnyTool, AgentMark>();

/** Marks `tool` as one the agents module made (a transfer tool, an agentTool). */
export function markTool<T extends AnyTool>(tool: T, mark: AgentMark): T {
  marks.set(tool, mark);
  return tool;
}

/** What `tool` stands for, if the agents module made it. */
export const agentMarkOf = (tool: AnyTool | undefined): AgentMark | undefined => (tool ? marks.get(tool) : undefined);

/** The agent a transfer tool hands off to. */
export function handoffTargetOf(tool: AnyTool | undefined): string | undefined {
  const m = agentMarkOf(tool);
  return m?.kind === 'handoff' ? m.to : undefined;
}
