import { UnknownAgentError, ValidationError } from '../contracts/errors.js';
import type { EventStore } from '../persistence/event-store.js';
import type { SessionHead } from '../persistence/head.js';
import { DEFAULT_AGENT, type Agent } from '../tools/define-agent.js';
import type { AgentRegistry } from './agent-registry.js';
import type { ParentLink } from './session-agent.js';

/**
 * The agent a session's log says it runs: the last one named by its latest run (its run/start
 * and agent/handoff events) or by a later session/attached; `default` for a log that names none
 * (one written before agents); undefined for a session with no history. And the parent call a
 * child session's log records (its run/start, its session/attached): an agent call's session.
 * Reads from the latest run's first run/start on (O(run), as the open run's fold).
 */
export async function recordedAgent(
  store: EventStore,
  sessionId: string,
  head: SessionHead | null | undefined,
): Promise<{ agent?: string; parent?: ParentLink }> {
  if (!head || head.lastSeq === 0) return {};
  const fromSeq = (head.openRun ?? head.lastSettledRun)?.startSeq ?? 1;
  let name: string | undefined;
  let parent: ParentLink | undefined;
  for await (const e of store.readEvents(sessionId, { fromSeq, toSeq: head.lastSeq })) {
    const p = e.payload;
    if (e.type === 'agent/handoff' && typeof p.to === 'string') name = p.to;
    else if (e.type === 'run/start') name = typeof p.agent === 'string' ? p.agent : DEFAULT_AGENT;
    else if (e.type === 'session/attached' && typeof p.agent === 'string') name = p.agent;
    if ((e.type === 'run/start' || e.type === 'session/attached') && isParentLink(p.parent)) parent ??= p.parent;
  }
  return { agent: name ?? DEFAULT_AGENT, ...(parent ? { parent } : {}) };
}

/** The parent call a child session's first record (its session/attached) names; undefined for any other session. */
export async function recordedParent(store: EventStore, sessionId: string): Promise<ParentLink | undefined> {
  for await (const e of store.readEvents(sessionId, { fromSeq: 1, toSeq: 1 }))
    if (e.type === 'session/attached' && isParentLink(e.payload.parent)) return e.payload.parent;
  return undefined;
}

const isParentLink = (v: unknown): v is ParentLink =>
  typeof v === 'object' && v !== null && typeof (v as ParentLink).sessionId === 'string' && typeof (v as ParentLink).callId === 'string';

/**
 * A child session (an agent call's) is its parent call's: the app neither opens it nor sends it
 * input (docs/agents.md, "Sub-agents: `agentTool`": it takes no input of its own) — a ValidationError naming
 * its parent, before anything is written.
 */
export function childSessionRefusal(where: string, sessionId: string, parent: ParentLink): ValidationError {
  return new ValidationError(where, [
    {
      path: ['sessionId'],
      message:
        `session ${sessionId} is the child session of an agent call (call ${parent.callId} of session ${parent.sessionId}): ` +
        "it runs only its parent call's run and takes no input, answer or control of its own; send them to the root session of its tree",
    },
  ]);
}

/**
 * The agent a session opened now runs: the one its log records, else the one asked for (else
 * `default`). A name the runtime does not define is an UnknownAgentError, before anything is written.
 */
export function agentToRun(registry: AgentRegistry, sessionId: string, recorded: string | undefined, asked: string | undefined): string {
  const name = recorded ?? asked ?? DEFAULT_AGENT;
  if (!registry.get(name)) throw new UnknownAgentError(sessionId, name, registry.names);
  return name;
}

/** The name of the agent `openSession` was asked for: one the runtime defines, and that very value when a value is given. */
export function askedAgent(registry: AgentRegistry, sessionId: string, asked: Agent | string): string {
  const name = agentToRun(registry, sessionId, undefined, typeof asked === 'string' ? asked : asked.name);
  if (typeof asked !== 'string' && registry.agents.get(name) !== asked)
    throw new ValidationError('openSession', [
      {
        path: ['agent'],
        message: `agent ${name} is not the runtime's agent of that name (pass the value given to createRuntime, or its name)`,
      },
    ]);
  return name;
}
