import type { StepPosition, ToolCallOutput } from '../contracts/calls.js';
import type { OutputSpec } from './final-output.js';
import type { OfferedTools, SessionServices } from './session-services.js';

/** What a handoff gives the running attempt: the target agent's tools, and its output schema when it has one. */
export interface Handoff {
  offered: OfferedTools;
  output?: OutputSpec;
}

/**
 * A step's results when some of its calls are held back (agent calls whose child waits for an
 * answer or was detached): a transfer call of the step does not hand over — the held calls run
 * again in a later attempt with the tools of the agent that asked for them — and is answered so,
 * for the model to ask again once they have answered.
 */
export function heldStepResults(env: SessionServices, results: ToolCallOutput[], held: readonly ToolCallOutput[]): ToolCallOutput[] {
  const seat = env.agent;
  if (!seat) return results;
  const waiting = held.map((r) => `${r.name} ${r.callId}`).join(', ');
  return results.map((r) =>
    seat.handoffTarget(r.name) === undefined || r.outcome.kind !== 'completed' || r.outcome.isError
      ? r
      : {
          ...r,
          outcome: {
            kind: 'completed' as const,
            content: `Not transferred: calls of this step have not answered yet (${waiting}); transfer again once they have.`,
            isError: true,
            concludesTurn: false,
            releaseResources: [],
          },
        },
  );
}

/**
 * A step's results with its handoff (docs/agents.md): the first transfer call that completed
 * hands the session over — `handoff(at)` stages its `agent/handoff` (committed with the results)
 * and switches the session's agent, so that the next model call is the target's. A later
 * transfer call of the same step is answered that it did not transfer.
 */
export function handoffResults(
  env: SessionServices,
  results: ToolCallOutput[],
): { results: ToolCallOutput[]; handoff?: (at: StepPosition) => Handoff } {
  const seat = env.agent;
  if (!seat) return { results };
  let first: { callId: string; to: string } | undefined;
  const out = results.map((r) => {
    const to = seat.handoffTarget(r.name);
    if (to === undefined || r.outcome.kind !== 'completed' || r.outcome.isError) return r;
    if (!first) {
      first = { callId: r.callId, to };
      return r;
    }
    return {
      ...r,
      outcome: {
        kind: 'completed' as const,
        content: `Not transferred: the conversation went to ${first.to} (an earlier transfer of this step).`,
        isError: true,
        concludesTurn: false,
        releaseResources: [],
      },
    };
  });
  if (!first) return { results };
  const { callId, to } = first;
  return {
    results: out,
    handoff: (at) => {
      const from = seat.name;
      const h = seat.handoff(to);
      env.writer.stage('agent/handoff', at, { from, to, callId, ...(h.output ? { output: h.output.record } : {}) });
      return h;
    },
  };
}
