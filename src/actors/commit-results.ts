import { contentText } from '../contracts/content.js';
import { promiseActor } from './promise-actor.js';
import type { StepPosition, ToolCallOutput } from '../contracts/calls.js';
import type { Usage } from '../contracts/message.js';
import { servicesIn, type ServicesSource, type SessionServices } from './session-services.js';

export interface CommitResultsInput {
  at: StepPosition;
  /** Every call's outcome, in the order the model asked for the calls. */
  results: ToolCallOutput[];
  usage?: Usage;
}

export interface CommitResultsOutput {
  /** Content of a `concludesTurn` result: the run's final answer. */
  concluded?: string;
  /** Results the verifier rejected (each a recovery). */
  rejections: number;
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
  const { at, results } = input;
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
  env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
  // the tools have run: if this commit fails, the run's end commits their results with run/end.
  // It lands under the next model call (docs/architecture.md, "Pipelined results commit"): the
  // call is built over these results and fails with this commit's error if it fails; every other
  // way on waits for it first (the run machine's settlingResults).
  await env.writer.commitAhead();
  await env.backpressure();
  return { ...(concluded !== undefined && rejections === 0 ? { concluded } : {}), rejections };
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
