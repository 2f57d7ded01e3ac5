import { toolBatchMachine } from '../machines/tool-batch.machine.js';
import { runMachine } from '../machines/run.machine.js';
import { sessionMachine } from '../machines/session.machine.js';
import { commitResultsOp } from '../actors/commit-results.js';
import { finalizeOp } from '../actors/finalize.js';
import { modelStepOp } from '../actors/model-step.js';
import type { SessionServices } from '../actors/session-services.js';
import { runEffectsActor } from '../actors/run-effects.js';
import { endRunOp, startRunOp } from '../actors/run-lifecycle.js';
import { toolCallActor } from '../actors/tool-call.js';

/** The session machine with the run's effects and tool calls bound to one session's environment. */
export function boundSessionMachine(env: SessionServices) {
  const run = runMachine.provide({
    actors: {
      effects: runEffectsActor({
        startRun: startRunOp(env),
        modelStep: modelStepOp(env),
        commitResults: commitResultsOp(env),
        finalize: finalizeOp(env),
        endRun: endRunOp(env),
      }),
      toolBatch: toolBatchMachine.provide({ actors: { toolCall: toolCallActor(env) } }),
    },
  });
  return sessionMachine.provide({ actors: { run } });
}
