import { z } from 'zod';
import type { OpenInternals } from '../actors/worker-services.js';
import { parseInput } from '../contracts/validate.js';
import type { ResumeMode } from './auto-resume.js';

/**
 * `runtime.openSession(id, options)`: `resume` says what a new run does over a run left
 * interrupted — `auto` (the default) continues it first, `manual` refuses the new run with
 * ExecutionBusy 'interrupted' and leaves the decision to the app (docs/recovery.md).
 */
export const OpenSessionOptions = z.strictObject({ resume: z.enum(['auto', 'manual']).optional() });
export type OpenSessionOptions = z.input<typeof OpenSessionOptions>;

/**
 * The public options and a serving worker's internals (its lease guard), which it passes as the
 * same second argument; a served session's interrupted run is its worker's to continue.
 */
export function openOptionsOf(given: unknown): { resume: ResumeMode; internal: OpenInternals | undefined } {
  if (given === undefined) return { resume: 'auto', internal: undefined };
  if (typeof given === 'object' && given !== null && 'guard' in given) {
    const { guard } = given as OpenInternals;
    return { resume: 'served', internal: guard ? { guard } : {} };
  }
  const o = parseInput(OpenSessionOptions, given, 'openSession: options');
  return { resume: o.resume ?? 'auto', internal: undefined };
}
