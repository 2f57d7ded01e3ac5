import { promiseActor } from './promise-actor.js';
import type { StepPosition } from '../contracts/calls.js';
import { CancelledError, type ValidationError } from '../contracts/errors.js';
import type { Usage } from '../contracts/message.js';
import { compact, type SummaryLimits } from './compaction.js';
import { BudgetRefusal } from './call-budget.js';
import { attemptCounted, type CountAttempt } from './call-model.js';
import { contextLimit, servicesIn, type ServicesSource, type SessionServices } from './session-services.js';

export interface PrepareContextInput extends SummaryLimits {
  at: StepPosition;
  /** Seq of the run's first run/start: compaction keeps everything from here on. */
  runStartSeq: number;
}

/**
 * The step's context is ready for its model call. `usage`/`cost`: a compaction's summary call
 * (the step counts it, also when the step then fails); `pricingError`: the app's pricing refused
 * that usage (the run fails, the usage still counted).
 */
export interface PrepareContextOutput {
  usage?: Usage;
  cost?: string;
  pricingError?: ValidationError;
  /** Still too large after compacting: the run fails with CapacityError. */
  overflow?: { size: number; limit: number };
  /** The summary call's worst case would cross `budget` (`budgetOwner`'s, an ancestor's): not made, the run ends budget_exhausted. */
  unaffordable?: { budget: 'maxOutputTokens' | 'maxCost'; budgetOwner?: string };
}

/**
 * DESIGN §4 item 1 and 9: steer inputs accepted since the last batch become user messages (one
 * commit); then, when system prompt + bootstrap + surface exceed `contextWindow − outputReserve`,
 * the older part is compacted (one summary call and one commit). Still too large → CapacityError.
 */
export async function prepareContext(
  env: SessionServices,
  input: PrepareContextInput,
  signal: AbortSignal,
  count?: CountAttempt,
): Promise<PrepareContextOutput> {
  const { at } = input;
  // compaction reads the log and the steers follow the results: the step's results first
  await env.writer.landed();
  // stopped (a cancel) meanwhile: no steer is taken, nothing is staged
  if (signal.aborted) throw new CancelledError('model call cancelled');
  await commitSteers(env, at);
  const limit = contextLimit(env);
  if (env.prefixTokens + env.surface.tokens <= limit) return {};
  let compacted;
  try {
    compacted = await compact(env, at, input.runStartSeq, signal, input, count);
  } catch (e) {
    if (!(e instanceof BudgetRefusal)) throw e;
    return { unaffordable: { budget: e.budget, ...(e.owner !== undefined ? { budgetOwner: e.owner } : {}) } };
  }
  if (signal.aborted) throw new CancelledError('model call cancelled');
  const { usage, cost, pricingError } = compacted;
  const out: PrepareContextOutput = {
    ...(usage ? { usage } : {}),
    ...(cost !== undefined ? { cost } : {}),
    ...(pricingError !== undefined ? { pricingError: pricingError as ValidationError } : {}),
  };
  const size = env.prefixTokens + env.surface.tokens;
  if (size > limit) return { ...out, overflow: { size, limit } };
  // steers accepted while the summary call ran go before this step's model call too
  await commitSteers(env, at);
  return out;
}

/** Steer inputs become user messages after the batch that settled and before this model call. */
async function commitSteers(env: SessionServices, at: StepPosition): Promise<void> {
  const steers = env.takeSteers();
  if (steers.length === 0) return;
  for (const s of steers) for (const message of s.messages) env.writer.stage('user/message', at, { message, inputId: s.inputId });
  await env.writer.commit();
}

/**
 * The `prepareContext` actor of the run machine, bound to one session's services.
 * @example
 * runMachine.provide({ actors: { prepareContext: prepareContextActor(services) } })
 */
export const prepareContextActor = (env: ServicesSource) =>
  promiseActor<PrepareContextOutput, PrepareContextInput>(({ input, signal, system, sendBack }) =>
    prepareContext(servicesIn(env, system), input, signal, (counted) => sendBack(attemptCounted(counted))),
  );
