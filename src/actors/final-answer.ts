import { promiseActor } from './promise-actor.js';
import type { StepPosition } from '../contracts/calls.js';
import type { Usage } from '../contracts/message.js';
import { checkOutput, outputCorrection, type OutputSpec } from './final-output.js';
import { servicesIn, type ServicesSource, type SessionServices } from './session-services.js';

export interface FinalAnswerInput {
  runId: string;
  at: StepPosition;
  content: string;
  /** The answer parsed against the run's output schema (verifyFinal found it; commitFinal stores it). */
  output?: unknown;
  /** Usage of the step that produced the answer (for step/end); absent for concludesTurn. */
  usage?: Usage;
  /** Whether this step's step/end is still to be written (a model answer) or already is (concludesTurn). */
  closeStep: boolean;
  /** The run's output schema: the answer must be JSON of it. */
  outputSpec?: OutputSpec;
}

export type VerifyFinalOutput =
  | { kind: 'accepted'; output?: unknown }
  | { kind: 'rejected'; reason: string }
  | { kind: 'output_rejected'; issues: string[] };

/**
 * DESIGN §4 item 6, first half: with an output schema, the answer must be JSON of it — else the
 * issues are committed (`verification/rejected`, target `output`, the correction the model reads,
 * and the step's end): a protocol correction. Then the app's `finalVerifier` judges the answer;
 * a rejection is committed the same way (target `final`): a recovery. An accepted answer commits
 * nothing yet.
 */
export async function verifyFinal(env: SessionServices, input: FinalAnswerInput): Promise<VerifyFinalOutput> {
  const { at } = input;
  const checked = input.outputSpec ? checkOutput(input.outputSpec, input.content) : undefined;
  if (checked && !checked.ok) {
    env.writer.stage('verification/rejected', at, {
      target: 'output',
      reason: checked.issues.join('; '),
      issues: checked.issues,
      message: outputCorrection(checked.issues),
    });
    if (input.closeStep) env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
    await env.writer.commit();
    return { kind: 'output_rejected', issues: checked.issues };
  }
  const accepted: VerifyFinalOutput = checked ? { kind: 'accepted', output: checked.value } : { kind: 'accepted' };
  if (!env.finalVerifier) return accepted;
  let rejection: string | undefined;
  try {
    rejection = await env.finalVerifier(input.content);
  } catch (e) {
    rejection = `final verifier failed: ${(e as Error)?.message ?? e}`;
  }
  if (rejection === undefined) return accepted;
  env.writer.stage('verification/rejected', at, {
    target: 'final',
    reason: rejection,
    message: { role: 'user', content: `Your final answer was rejected by verification: ${rejection}. Please revise it.` },
  });
  if (input.closeStep) env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
  await env.writer.commit();
  return { kind: 'rejected', reason: rejection };
}

/**
 * The id of a run's final answer: unique across sessions (an idempotent owner may de-duplicate on it alone);
 * the turn keeps it unique where an older log reused a runId.
 */
export const finalMessageIdOf = (sessionId: string, runId: string, at: StepPosition) =>
  `${sessionId}/${runId}/final/${at.turn}.${at.attempt}.${at.step}`;

/**
 * The write-ahead half of the final answer: `final/message` (with the step's end) is committed
 * before anything is delivered. From here on the answer is delivered whatever happens next.
 */
export async function commitFinal(env: SessionServices, input: FinalAnswerInput): Promise<{ finalMessageId: string }> {
  const { at } = input;
  const finalMessageId = finalMessageIdOf(env.sessionId, input.runId, at);
  env.writer.stage('final/message', at, {
    finalMessageId,
    runId: input.runId,
    content: input.content,
    ...(input.output !== undefined ? { output: input.output } : {}),
  });
  if (input.closeStep) env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
  await env.writer.commit();
  await env.backpressure();
  return { finalMessageId };
}

export interface DeliverFinalInput {
  runId: string;
  at: StepPosition;
  content: string;
  output?: unknown;
  finalMessageId: string;
}

export type DeliverFinalOutput = { kind: 'delivered' } | { kind: 'delivery_unknown'; reason: string };

/**
 * `delivery.deliver(final)` (DESIGN §4 item 6); its outcome (`delivery/committed` or
 * `delivery/unknown`) is staged for the run's closing commit. Without a delivery owner the result
 * itself carries the answer.
 * Contract: the owner's `deliver` may throw; that is `delivery_unknown`, never a second delivery.
 */
export async function deliverFinal(env: SessionServices, input: DeliverFinalInput): Promise<DeliverFinalOutput> {
  const { at, finalMessageId, runId } = input;
  if (!env.delivery) {
    env.writer.stage('delivery/committed', at, { finalMessageId, owner: 'result' });
    return { kind: 'delivered' };
  }
  // the last check before the delivery, after the last await: a writer that lost the session
  // since final/message delivers nothing (the session's next writer settles the final)
  if (!env.writer.mayStartEffect())
    return { kind: 'delivery_unknown', reason: 'not delivered: this writer no longer holds the session (fenced, lease lost or closed)' };
  try {
    await env.delivery.deliver({
      finalMessageId,
      sessionId: env.sessionId,
      runId,
      turn: at.turn,
      step: at.step,
      content: input.content,
      ...(input.output !== undefined ? { output: input.output } : {}),
    });
    env.writer.stage('delivery/committed', at, { finalMessageId });
    return { kind: 'delivered' };
  } catch (e) {
    const reason = `delivery owner threw: ${(e as Error)?.message ?? e}`;
    env.writer.stage('delivery/unknown', at, { finalMessageId, reason });
    return { kind: 'delivery_unknown', reason };
  }
}

/**
 * The run machine's final-answer actors, bound to one session's services.
 * @example
 * runMachine.provide({ actors: finalAnswerActors(services) })
 */
export const verifyFinalActor = (env: ServicesSource) =>
  promiseActor<VerifyFinalOutput, FinalAnswerInput>(({ input, system }) => verifyFinal(servicesIn(env, system), input));
export const commitFinalActor = (env: ServicesSource) =>
  promiseActor<{ finalMessageId: string }, FinalAnswerInput>(({ input, system }) => commitFinal(servicesIn(env, system), input));
export const deliverFinalActor = (env: ServicesSource) =>
  promiseActor<DeliverFinalOutput, DeliverFinalInput>(({ input, system }) => deliverFinal(servicesIn(env, system), input));
