import { toolBatchMachine } from '../machines/tool-batch.machine.js';
import { runMachine } from '../machines/run.machine.js';
import { sessionMachine } from '../machines/session.machine.js';
import { commitResultsActor } from './commit-results.js';
import { finalizeActor } from './finalize.js';
import { modelStepActor } from './model-step.js';
import type { RunEnv } from './run-env.js';
import { endRunActor, startRunActor } from './run-lifecycle.js';
import { toolCallActor } from './tool-call.js';

/** The session machine with every effect actor bound to one session's environment. */
export function boundSessionMachine(env: RunEnv) {
  const run = runMachine.provide({
    actors: {
      startRun: startRunActor(env),
      modelStep: modelStepActor(env),
      toolBatch: toolBatchMachine.provide({ actors: { toolCall: toolCallActor(env) } }),
      commitResults: commitResultsActor(env),
      finalize: finalizeActor(env),
      endRun: endRunActor(env),
    },
  });
  return sessionMachine.provide({ actors: { run } });
}
