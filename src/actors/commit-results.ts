import { contentText } from '../contracts/content.js';
import { promiseActor } from './promise-actor.js';
import type { StepPosition, ToolCallIntent, ToolCallOutput } from '../contracts/calls.js';
import type { PendingRequest } from '../contracts/events.js';
import type { Usage } from '../contracts/message.js';
import { servicesIn, type ServicesSource, type SessionServices } from './session-services.js';
import { handoffResults, heldStepResults, type Handoff } from './handoff.js';

export interface CommitResultsInput {
  at: StepPosition;
  /** Every call's outcome, in the order the model asked for the calls. */
  results: ToolCallOutput[];
  usage?: Usage;
  /** The step's call intents (a call left unsettled is held back with them). */
  intents?: ToolCallIntent[];
  /**
   * Whether the run has been asked to cancel by now (read after the last await before the
   * results are staged): a cancelled run never waits on a child's request (its end answers the
   * calls left unsettled `cancelled`). Absent: never.
   */
  cancelRequested?: () => boolean;
}

export interface CommitResultsOutput {
  /** Content of a `concludesTurn` result: the run's final answer. */
  concluded?: string;
  /** Results the verifier rejected (each a recovery). */
  rejections: number;
  /** A transfer call handed the session over: the tools (and output schema) of the rest of the attempt. */
  handoff?: Handoff;
  /**
   * Calls left without a result (agent calls whose child waits or detached), and the request the
   * run now waits for (none staged once cancelled).
   */
  unsettled?: { pendingRequest?: PendingRequest };
}

async function verdict(env: SessionServices, r: ToolCallOutput): Promise<string | undefined> {
  if (!env.verifier) return undefined;
  try {
    return await env.verifier(r.name, r.outcome);
  } catch (e) {
    return `verifier failed: ${(e as Error)?.message ?? e}`;
  }
}

/**
 * The step's second commit point: every tool result (with verifier rejections, additional
 * messages and released locks) and `step/end`, in one append, started and not waited for.
 */
export async function commitResults(env: SessionServices, input: CommitResultsInput): Promise<CommitResultsOutput> {
  const { at } = input;
  const unsettled = input.results.filter((r) => r.unsettled);
  // a transfer call's handoff (the first of the step) is committed with its result — none while
  // calls of the step are held back (they go on as the agent that asked for them), unless the run
  // was cancelled: it ends here, no held call runs again, so its transfer hands over as ever
  const settled = unsettled.length > 0 ? input.results.filter((r) => !r.unsettled) : input.results;
  const { results, handoff } =
    unsettled.length > 0 && !input.cancelRequested?.()
      ? { results: heldStepResults(env, settled, unsettled), handoff: undefined }
      : handoffResults(env, settled);
  let concluded: string | undefined;
  let rejections = 0;
  const verdicts = env.verifier ? await Promise.all(results.map((r) => verdict(env, r))) : [];
  // Every tool result first (providers need them right after the assistant message), then the
  // verifier feedback and additional messages.
  for (const r of results) {
    const o = r.outcome;
    env.writer.stage('tool/result', at, {
      callId: r.callId,
      name: r.name,
      outcome: o,
      ...(o.kind === 'skipped' ? {} : { startedAt: r.startedAt, endedAt: r.endedAt }),
    });
  }
  results.forEach((r, i) => {
    const o = r.outcome;
    const rejection = verdicts[i];
    if (rejection !== undefined) {
      rejections++;
      env.writer.stage('verification/rejected', at, {
        target: 'tool',
        callId: r.callId,
        reason: rejection,
        message: { role: 'user', content: `The result of tool call ${r.callId} (${r.name}) was rejected by verification: ${rejection}` },
      });
      return;
    }
    if (o.kind === 'completed') {
      for (const m of o.additionalMessages ?? []) env.writer.stage('user/message', at, { message: m });
      if (o.concludesTurn && concluded === undefined) concluded = contentText(o.content);
    }
  });
  const handedOff = handoff?.(at);
  // the cancel check right before the request is staged, after the verdicts' await: a cancelled
  // run stages no request of a child (the run ends cancelled; its end answers the calls)
  const waiting = unsettled.length === 0 ? undefined : input.cancelRequested?.() ? {} : holdBack(env, at, unsettled, input.intents ?? []);
  // a step with a call left unsettled goes on in the run's next attempt, which ends it
  if (!waiting) env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
  // the tools have run: if this commit fails, the run's end commits their results with run/end.
  // It lands under the next model call (docs/architecture.md, "Pipelined results commit"): the
  // call is built over these results and fails with this commit's error if it fails; every other
  // way on waits for it first (the run machine's settlingResults).
  await env.writer.commitAhead();
  await env.backpressure();
  return {
    ...(concluded !== undefined && rejections === 0 ? { concluded } : {}),
    rejections,
    ...(handedOff ? { handoff: handedOff } : {}),
    ...(waiting ? { unsettled: waiting } : {}),
  };
}

/**
 * Calls left without a result (docs/agents.md, "Requests from a child"): the first child request
 * among them (in call order) is the run's pending request, staged as an approval or question with
 * every unsettled call as its batch (a respond runs them all again: the one asked answers, the
 * others ask again or go on) and `run/suspended`. Without a request the run is detached.
 */
function holdBack(
  env: SessionServices,
  at: StepPosition,
  unsettled: readonly ToolCallOutput[],
  intents: readonly ToolCallIntent[],
): { pendingRequest?: PendingRequest } {
  const pendingRequest = unsettled.find((r) => r.unsettled!.pendingRequest)?.unsettled!.pendingRequest;
  if (!pendingRequest) return {};
  const held = new Set(unsettled.map((r) => r.callId));
  const batch = intents.filter((c) => held.has(c.callId));
  env.writer.stage(pendingRequest.kind === 'question' ? 'question/asked' : 'approval/requested', at, { pendingRequest, batch });
  env.writer.stage('run/suspended', at, { pendingRequest });
  return { pendingRequest };
}

/**
 * The `commitResults` actor of the run machine, bound to one session's services.
 * @example
 * runMachine.provide({ actors: { commitResults: commitResultsActor(services) } })
 */
export const commitResultsActor = (env: ServicesSource) =>
  promiseActor<CommitResultsOutput, CommitResultsInput>(({ input, system }) => commitResults(servicesIn(env, system), input));

/**
 * The `settleResults` actor of the run machine: resolves once the step's results commit has
 * landed, or fails with its error (the run then fails as it would have at committingResults).
 */
export const settleResultsActor = (env: ServicesSource) =>
  promiseActor<void, void>(({ system }) => servicesIn(env, system).writer.landed());
