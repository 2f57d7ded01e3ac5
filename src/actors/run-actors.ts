import { toolBatchMachine } from '../machines/tool-batch.machine.js';
import { runMachine } from '../machines/run.machine.js';
import { sessionMachine } from '../machines/session.machine.js';
import { commitResultsOp } from './commit-results.js';
import { finalizeOp } from './finalize.js';
import { modelStepOp } from './model-step.js';
import type { RunEnv } from './run-env.js';
import { runEffectsActor } from './run-effects.js';
import { endRunOp, startRunOp } from './run-lifecycle.js';
import { toolCallActor } from './tool-call.js';

/** The session machine with the run's effects and tool calls bound to one session's environment. */
export function boundSessionMachine(env: RunEnv) {
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
