import type { StepPosition } from '../contracts/calls.js';
import { CancelledError } from '../contracts/errors.js';
import { seqOf } from './commit-results.js';
import type { Usage } from '../contracts/message.js';
import type { SessionServices } from './session-services.js';

export interface FinalizeInput {
  runId: string;
  at: StepPosition;
  content: string;
  /** Usage of the step that produced the answer (for step/end); absent for concludesTurn. */
  usage?: Usage;
  /** Whether this step's step/end is still to be written (a model answer) or already is (concludesTurn). */
  closeStep: boolean;
}

export type FinalizeOutput =
  | { kind: 'rejected'; reason: string }
  | { kind: 'delivered'; finalMessageId: string }
  | { kind: 'delivery_unknown'; finalMessageId: string; reason: string };

/**
 * The final answer (DESIGN §4 item 6): `finalVerifier`, then `final/message` committed, then
 * `delivery.deliver(final)`; its outcome is staged for the run's closing commit.
 */
export const finalizeOp =
  (env: SessionServices) =>
  async (input: FinalizeInput): Promise<FinalizeOutput> => {
    const { at, content, runId } = input;
    let rejection: string | undefined;
    if (env.finalVerifier) {
      try {
        rejection = await env.finalVerifier(content);
      } catch (e) {
        rejection = `final verifier failed: ${(e as Error)?.message ?? e}`;
      }
    }
    if (rejection !== undefined) {
      env.writer.stage('verification/rejected', at, {
        target: 'final',
        reason: rejection,
        message: { role: 'user', content: `Your final answer was rejected by verification: ${rejection}. Please revise it.` },
      });
      if (input.closeStep) env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
      const records = await env.writer.commit();
      if (input.closeStep) env.emit({ type: 'step_end', step: at.step, ...(input.usage ? { usage: input.usage } : {}) }, seqOf(records, 'step/end'));
      return { kind: 'rejected', reason: rejection };
    }
    // unique across sessions, so an idempotent owner may de-duplicate on it alone
    // the turn keeps it unique even where an older log reused a runId
    const finalMessageId = `${env.sessionId}/${runId}/final/${at.turn}.${at.attempt}.${at.step}`;
    // a cancel that came while the answer was verified: no final is committed (once it is, it is
    // delivered whatever happens next — the write-ahead rule)
    if (env.cancelSignal.aborted) {
      if (input.closeStep) env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
      throw new CancelledError('cancelled before the final answer was committed');
    }
    env.writer.stage('final/message', at, { finalMessageId, runId, content });
    if (input.closeStep) env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
    const records = await env.writer.commit();
    if (input.closeStep) env.emit({ type: 'step_end', step: at.step, ...(input.usage ? { usage: input.usage } : {}) }, seqOf(records, 'step/end'));
    await env.backpressure();
    if (!env.delivery) {
      env.writer.stage('delivery/committed', at, { finalMessageId, owner: 'result' });
      return { kind: 'delivered', finalMessageId };
    }
    try {
      await env.delivery.deliver({ finalMessageId, sessionId: env.sessionId, runId, turn: at.turn, step: at.step, content });
      env.writer.stage('delivery/committed', at, { finalMessageId });
      return { kind: 'delivered', finalMessageId };
    } catch (e) {
      const reason = `delivery owner threw: ${(e as Error)?.message ?? e}`;
      env.writer.stage('delivery/unknown', at, { finalMessageId, reason });
      return { kind: 'delivery_unknown', finalMessageId, reason };
    }
  };
