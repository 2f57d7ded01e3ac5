import { z } from 'zod';
import { parseInput } from '../contracts/validate.js';
import { AgentRef } from '../tools/define-agent.js';
import type { Agent } from '../tools/define-agent.js';
import type { ResumeMode } from './auto-resume.js';

/**
 * `runtime.openSession(id, options)`:
 * - `resume` says what a new run does over a run left interrupted — `auto` (the default)
 *   continues it first, `manual` refuses the new run with ExecutionBusy 'interrupted' and leaves
 *   the decision to the app (docs/recovery.md);
 * - `takeover: true` opens a session another live process writes, fencing its writer (default:
 *   SessionHeldError; docs/guarantees.md, "One live writer");
 * - `agent` (a value or its name) is the agent a new session runs; a session with history runs
 *   the one its log records (docs/agents.md); one the runtime does not define: UnknownAgentError.
 * @example
 * const session = await runtime.openSession('s1', { resume: 'manual', takeover: true })
 */
export const OpenSessionOptions = z.strictObject({
  resume: z.enum(['auto', 'manual']).optional(),
  takeover: z.boolean().optional(),
  agent: AgentRef.optional(),
});
export type OpenSessionOptions = z.input<typeof OpenSessionOptions>;

/**
 * The public options with their defaults, and the `resume` given (a serving worker's internals
 * never come here: they are marked SERVED).
 */
export function openOptionsOf(given: unknown): { resume: ResumeMode; resumeGiven?: ResumeMode; takeover: boolean; agent?: Agent | string } {
  const o = parseInput(OpenSessionOptions, given ?? {}, 'openSession: options');
  return {
    resume: o.resume ?? 'auto',
    ...(o.resume !== undefined ? { resumeGiven: o.resume } : {}),
    takeover: o.takeover ?? false,
    ...(o.agent !== undefined ? { agent: o.agent as Agent | string } : {}),
  };
}
