import type { AnyTool } from './tool-definition.js';
import type { Agent } from './define-agent.js';

/**
 * What a tool the agents module made stands for: a handoff to an agent, or a sub-agent call —
 * whose `standIn` is the agentTool's own execute, which the runtime replaces (boundAgentTool).
 */
export type AgentMark = { kind: 'handoff'; to: string } | { kind: 'agent'; agent: Agent; standIn: AnyTool['execute'] };

/**
 * Where a tool keeps its mark: a property under a symbol of this module's own (no one else can
 * write it), enumerable so that a copy `{ ...tool }` keeps it — `defineTool({ ...tool, timeoutMs })`
 * defines an agentTool again, still one (a mark kept beside the tool, in a WeakMap, would be lost).
 */
const MARK = Symbol('actorloop.agentMark');

/** Marks `tool` as one the agents module made (a transfer tool, an agentTool). */
export function markTool<T extends AnyTool>(tool: T, mark: AgentMark): T {
  Object.defineProperty(tool, MARK, { value: mark, enumerable: true });
  return tool;
}

/** What `tool` (or a copy of it) stands for, if the agents module made it. */
export const agentMarkOf = (tool: object | undefined): AgentMark | undefined => (tool as { [MARK]?: AgentMark } | undefined)?.[MARK];

/** A copy of `tool` without its mark: a tool the runtime has bound (boundAgentTool) runs as it is, never bound again. */
export function unmarked<T extends AnyTool>(tool: T): T {
  const { [MARK]: _, ...rest } = tool as T & { [MARK]?: AgentMark };
  return rest as T;
}

/** The agent a transfer tool hands off to. */
export function handoffTargetOf(tool: AnyTool | undefined): string | undefined {
  const m = agentMarkOf(tool);
  return m?.kind === 'handoff' ? m.to : undefined;
}
