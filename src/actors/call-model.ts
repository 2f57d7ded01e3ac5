import { promiseActor } from './promise-actor.js';
import type { StepPosition } from '../contracts/calls.js';
import { CancelledError, ProviderError } from '../contracts/errors.js';
import type { FinishReason, ToolCall, Usage } from '../contracts/message.js';
import { sha256 } from '../persistence/surface.js';
import { requestOutputOf, withOutputInstruction, type OutputSpec } from './final-output.js';
import { BudgetRefusal, countedAt, outputTokens, toolTokens } from './call-budget.js';
import { emitGate } from './emit-gate.js';
import { overrunOf, type BudgetLeft, type Counted, type Overrun } from '../contracts/reservation.js';
import { contextReady, NO_TOOLS, servicesIn, type OfferedTools, type ServicesSource, type SessionServices } from './session-services.js';

export { BudgetRefusal } from './call-budget.js';

export {
  attemptCounted,
  callWithRetries,
  type AttemptCounted,
  type CalledModel,
  type CallSpec,
  type CountAttempt,
} from './model-attempts.js';
import { attemptCounted, callWithRetries, type CountAttempt } from './model-attempts.js';
import { distinctCallIds } from '../tools/validate-calls.js';

export interface CallModelInput {
  at: StepPosition;
  /**
   * The step's context was just prepared: called as it stands (a steer that came meanwhile joins
   * the next step, as it would have during the call).
   */
  prepared?: boolean;
  /**
   * What the run's usage budgets (maxOutputTokens, maxCost) leave: the call reserves its worst
   * case from it, its output cap set so that it fits (absent: no such budget, no cap).
   */
  budgetLeft?: BudgetLeft;
  /** The attempt's tools (absent: none): their specs are offered, their catalog digest is part of the request's. */
  offered?: OfferedTools;
  /** The run's output schema: in the request (and the system message of a provider without a native mode). */
  output?: OutputSpec;
  /** When the run's maxDurationMs runs out (the runtime's clock): a wait for a rate limit ends then. */
  deadlineAt?: number;
}

/**
 * The model's answer, staged as `assistant/message`: tool calls to plan, or the run's answer.
 * `overrun`: usage the provider reported above the call's reservation; `counted`: the call's
 * reservation, when the provider reported no usage (the step's failed attempts were counted as
 * they failed: `count`).
 */
export type CallModelOutput = { usage?: Usage; cost?: string; counted?: Counted; overrun?: Overrun } & (
  | { kind: 'toolCalls'; toolCalls: ToolCall[]; finishReason: FinishReason }
  | { kind: 'answer'; content: string }
  /** Nothing called: a steer input waits or the context is too large; prepare it first. */
  | { kind: 'unprepared' }
  /**
   * No call started: its worst case would cross `budget` (the run ends budget_exhausted naming it),
   * `budgetOwner`'s when that is an ancestor session's (a sub-agent's parent's remaining).
   */
  | { kind: 'unaffordable'; budget: 'maxOutputTokens' | 'maxCost'; budgetOwner?: string }
  /**
   * The answer is no answer (a refusal under an output schema, or one the content filter removed
   * entirely): the run fails with `error`, its call's usage and cost counted as any answer's.
   */
  | { kind: 'refused'; error: ProviderError }
);

/**
 * The step's model call (DESIGN §4 item 2), on a prepared context (else it answers `unprepared`,
 * calling nothing): `step/start`, the call with retries over the surface
 * (deltas streamed live), the response priced and staged as `assistant/message` for the step's
 * first commit point. A refusal's text is the answer when there is no other, unless the run has an
 * output schema: then the refusal fails the run by name (ProviderError `refusal`), as an answer
 * the provider's content filter removed entirely does (`content_filter`), and one the output token
 * limit cut before any text (`length`) — its usage counted first.
 */
export async function callModel(
  env: SessionServices,
  input: CallModelInput,
  signal: AbortSignal,
  count?: CountAttempt,
): Promise<CallModelOutput> {
  const { at } = input;
  if (!input.prepared && !contextReady(env)) return { kind: 'unprepared' };
  // the previous step's results may still be landing (LogWriter.commitAhead): what the call shows
  // subscribers waits until they are durable
  const gate = emitGate(env);
  env.writer.stage('step/start', at, {});
  gate.emit({ type: 'step_start', step: at.step });
  env.tracer?.stepStarting(at.step);
  let called;
  try {
    await env.backpressure();
    if (signal.aborted) throw new CancelledError('model call cancelled');
    // the previous step's results failed to land meanwhile: no call, the step fails with their error
    const failed = env.writer.aheadFailure;
    if (failed) throw failed.error;
    // the request is built over the results still landing, read with the surface in one go (they
    // move into the surface when they land)
    const pending = env.writer.pendingMessages;
    // one exact-size copy (concat), not a spread's growing array: O(history) per step, but a memcpy
    const messages = env.prefix.concat(env.surface.messages, pending);
    // an output schema: in the request, and for a provider without a native mode in the system message too
    const out = input.output;
    const offered = input.offered ?? NO_TOOLS;
    // the request's input estimate: the context's running estimate, its tools and output instruction
    const inputTokens =
      env.prefixTokens + env.surface.tokens + env.writer.pendingTokens + toolTokens(offered.specs) + (out ? outputTokens(out) : 0);
    called = await callWithRetries(env, at, signal, {
      messages: out && env.model.structuredOutput !== 'native' ? withOutputInstruction(messages, out) : messages,
      tools: offered.specs,
      digest: env.surface.requestDigest(
        out ? sha256(`${env.prefixDigest}\u0000${out.record.digest}`) : env.prefixDigest,
        offered.catalogDigest,
        pending,
      ),
      ...(out ? { output: requestOutputOf(out) } : {}),
      live: true,
      emit: gate.emit,
      inputTokens,
      budget: { ...(input.budgetLeft ? { left: input.budgetLeft } : {}) },
      ...(input.deadlineAt !== undefined ? { deadlineAt: input.deadlineAt } : {}),
      ...(count ? { count } : {}),
    });
  } catch (e) {
    if (!(e instanceof BudgetRefusal)) throw e;
    // no call started: the step ends here (its failed attempts, if any, counted as they failed)
    await gate.landed;
    return {
      kind: 'unaffordable',
      budget: e.budget,
      ...(e.owner !== undefined ? { budgetOwner: e.owner } : {}),
    };
  } finally {
    // a results commit that failed fails the step with its own error, whatever the call did
    await gate.landed;
  }
  // stopped (a cancel) while the results landed: nothing of this call is staged
  if (signal.aborted) throw new CancelledError('model call cancelled');
  const { res, latencyMs, digest, reserved, capped } = called;
  const message = { ...res.message, role: 'assistant' as const };
  if (message.toolCalls) message.toolCalls = distinctCallIds(message.toolCalls);
  // the app's pricing may have thrown: before the message is staged, so a failed step leaves no
  // assistant tool calls without results on the surface
  if (called.pricingError !== undefined) throw called.pricingError;
  const priced = called.cost !== undefined ? { cost: called.cost } : {};
  const usage = res.usage ? { usage: res.usage } : {};
  const overrun = reserved ? overrunOf(at.step, reserved, capped, res.usage, priced.cost) : undefined;
  // an answer whose usage never came back counts at its reservation, never at zero (as a failed attempt's)
  const unreported = reserved && !res.usage ? countedAt(reserved) : undefined;
  env.writer.stage('assistant/message', at, {
    message,
    ...usage,
    finishReason: res.finishReason,
    latencyMs,
    requestDigest: digest,
    ...priced,
    ...(reserved ? { reserved } : {}),
    ...(unreported ? { counted: 'reservation' } : {}),
    ...(overrun ? { overrun } : {}),
  });
  const spent = {
    ...usage,
    ...priced,
    ...(unreported ? { counted: unreported } : {}),
    ...(overrun ? { overrun } : {}),
  };
  const toolCalls = message.toolCalls ?? [];
  if (toolCalls.length > 0) return { kind: 'toolCalls', toolCalls, finishReason: res.finishReason, ...spent };
  const content = message.content || res.refusal || '';
  // under an output schema a refusal is no answer to correct: the run fails by name, with its text
  if (input.output && res.finishReason === 'refusal') {
    const error = new ProviderError(`the model refused to answer: ${res.refusal || message.content || '(no text)'}`, {
      retryable: false,
      code: 'refusal',
    });
    return { kind: 'refused', error, ...spent };
  }
  if (!content && res.finishReason === 'content_filter') {
    const error = new ProviderError("the provider's content filter removed the model's answer", {
      retryable: false,
      code: 'content_filter',
    });
    return { kind: 'refused', error, ...spent };
  }
  // a reasoning model that spent the whole limit thinking: no answer, rather than an empty one
  if (!content && res.finishReason === 'length') {
    const error = new ProviderError(
      'the model reached its output token limit before writing any answer: ' +
        "raise the model's maxTokens (or the run's budget.maxOutputTokens)",
      { retryable: false, code: 'length' },
    );
    return { kind: 'refused', error, ...spent };
  }
  return { kind: 'answer', content, ...spent };
}

/**
 * The `callModel` actor of the run machine, bound to one session's services.
 * @example
 * runMachine.provide({ actors: { callModel: callModelActor(services) } })
 */
export const callModelActor = (env: ServicesSource) =>
  promiseActor<CallModelOutput, CallModelInput>(({ input, signal, system, sendBack }) =>
    callModel(servicesIn(env, system), input, signal, (counted) => sendBack(attemptCounted(counted))),
  );
