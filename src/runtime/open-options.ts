import { z } from 'zod';
import { AgentRef } from '../tools/define-agent.js';

/** What `openSession` takes besides the session id. Unknown keys are refused. */
export const OpenSessionOptions = z.strictObject({
  /** Open even if another live process writes the session: its writer is fenced (default false: SessionHeldError). */
  takeover: z.boolean().default(false),
  /** The agent a new session runs (a value or its name); a session with history runs the one its log records. */
  agent: AgentRef.optional(),
});
export type OpenSessionOptions = z.input<typeof OpenSessionOptions>;
