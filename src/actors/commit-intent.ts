import { promiseActor } from './promise-actor.js';
import type { StepPosition, ToolCallIntent } from '../contracts/calls.js';
import { CancelledError } from '../contracts/errors.js';
import type { PendingRequest } from '../contracts/events.js';
import type { FinishReason, ToolCall, Usage } from '../contracts/message.js';
import { planToolCalls } from '../tools/plan-calls.js';
import { NO_TOOLS, servicesIn, type ServicesSource, type SessionServices } from './session-services.js';
import type { AnyTool } from '../tools/define-tool.js';

export interface CommitIntentInput {
  runId: string;
  at: StepPosition;
  toolCalls: ToolCall[];
  finishReason: FinishReason;
  /** The step's usage so far (its model call and compaction): step/end carries it when the step ends here. */
  usage?: Usage;
  /** A cancel arrived while the model answered: the run does not suspend (the batch skips every call). */
  cancelRequested: boolean;
  /** The attempt's tools (absent: none): the calls are planned against them. */
  tools?: ReadonlyMap<string, AnyTool>;
}

/** What the step's first commit point decided for its tool calls (ToolCallPlan, once committed). */
export type CommitIntentOutput =
  | { kind: 'rejected' }
  | { kind: 'blocked'; locks: string[] }
  | { kind: 'suspended'; pendingRequest: PendingRequest }
  | { kind: 'intents'; calls: ToolCallIntent[] };

/**
 * The step's first commit point (DESIGN §4 items 3–5, write-ahead rule): the assistant message
 * (staged by the model call) with what `planToolCalls` decided — `tool/batch-rejected`, skipped
 * results of a blocked batch, the question or approval request and `run/suspended`, or the
 * `tool/call` intents of the batch to run — in one append.
 */
export async function commitIntent(env: SessionServices, input: CommitIntentInput): Promise<CommitIntentOutput> {
  const { at, toolCalls } = input;
  const closeStep = () => env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
  let plan: ReturnType<typeof planToolCalls>;
  try {
    plan = planToolCalls({
      sessionId: env.sessionId,
      runId: input.runId,
      step: at.step,
      toolCalls,
      finishReason: input.finishReason,
      tools: input.tools ?? NO_TOOLS.tools,
      heldLocks: env.heldLocks,
      approvalFor: env.approvalFor,
      approvalExpiresAt: env.clock.now() + env.config.approvalTimeoutMs,
    });
    // cancelled meanwhile: no suspension (the calls are answered `skipped` below)
    if (plan.kind === 'suspend' && input.cancelRequested) throw new CancelledError('cancelled before the run suspended for an answer');
  } catch (e) {
    // An app function (a tool's resources or needsApproval) threw, or a cancel came: the model's
    // tool calls must not stay on the surface unanswered (providers refuse that). The run ends
    // on the error and its closing commit writes these.
    const why = `not run: the step failed (${(e as Error)?.message ?? String(e)})`;
    for (const c of toolCalls)
      env.writer.stage('tool/result', at, { callId: c.id, name: c.name, outcome: { kind: 'skipped', reason: why } });
    closeStep();
    throw e;
  }
  switch (plan.kind) {
    case 'rejected':
      env.writer.stage('tool/batch-rejected', at, { issues: plan.issues });
      closeStep();
      await env.writer.commit();
      return { kind: 'rejected' };
    case 'blocked': {
      const reason = `blocked: resources ${plan.locks.join(', ')} are locked by an uncertain earlier call`;
      for (const d of plan.calls)
        env.writer.stage('tool/result', at, { callId: d.callId, name: d.name, outcome: { kind: 'skipped', reason } });
      closeStep();
      await env.writer.commit();
      return { kind: 'blocked', locks: plan.locks };
    }
    case 'suspend': {
      const { pendingRequest } = plan;
      env.writer.stage(pendingRequest.kind === 'question' ? 'question/asked' : 'approval/requested', at, {
        pendingRequest,
        batch: plan.calls,
      });
      env.writer.stage('run/suspended', at, { pendingRequest });
      await env.writer.commit();
      return { kind: 'suspended', pendingRequest };
    }
    case 'run':
      for (const d of plan.calls) env.writer.stage('tool/call', at, { ...d });
      await env.writer.commit();
      return { kind: 'intents', calls: plan.calls };
  }
}

/**
 * The `commitIntent` actor of the run machine, bound to one session's services.
 * @example
 * runMachine.provide({ actors: { commitIntent: commitIntentActor(services) } })
 */
export const commitIntentActor = (env: ServicesSource) =>
  promiseActor<CommitIntentOutput, CommitIntentInput>(({ input, system }) => commitIntent(servicesIn(env, system), input));
