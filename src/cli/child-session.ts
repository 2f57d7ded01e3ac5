import type { EventStore } from '../persistence/event-store.js';
import { CliError, EXIT } from './errors.js';
import { command } from './invocation.js';
import { recordedParent } from '../runtime/recorded-agent.js';

/** How deep a chain of agent calls is followed up to its root (deeper than any tree `view` draws). */
const MAX_DEPTH = 64;

/**
 * The parent call and root session of a child session (an agent call's: its log records a
 * `parent`), or undefined for a session that is no one's child.
 */
export async function childSessionRoot(
  store: EventStore,
  sessionId: string,
): Promise<{ parent: { sessionId: string; callId: string }; root: string } | undefined> {
  const parent = await recordedParent(store, sessionId);
  if (!parent) return undefined;
  let root = parent.sessionId;
  for (let depth = 0; depth < MAX_DEPTH; depth++) {
    const up = await recordedParent(store, root);
    if (!up) break;
    root = up.sessionId;
  }
  return { parent, root };
}

/**
 * Refuses to open a child session on its own (exit 2): it is resumed through its root session,
 * whose run resumes the agent call that runs it (docs/agents.md). `flag` names the log again
 * (`--data DIR`) in the hint.
 */
export async function refuseChildSession(store: EventStore, sessionId: string, flag: string): Promise<void> {
  const child = await childSessionRoot(store, sessionId);
  if (!child) return;
  const { parent, root } = child;
  throw new CliError(
    `session ${sessionId} is a child session (agent call ${parent.callId} of session ${parent.sessionId}): ` +
      `it is resumed through its root session ${root}, whose continued run resumes the call, not on its own; ` +
      `\`${command(`recover ${root} ${flag}`)}\` shows what that would find`,
    EXIT.usage,
  );
}
