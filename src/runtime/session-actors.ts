import { createActor, fromPromise, type InspectionEvent } from 'xstate';
import { callModelActor } from '../actors/call-model.js';
import { commitIntentActor } from '../actors/commit-intent.js';
import { commitResultsActor } from '../actors/commit-results.js';
import { endRunActor } from '../actors/end-run.js';
import { commitFinalActor, deliverFinalActor, verifyFinalActor } from '../actors/final-answer.js';
import { prepareContextActor } from '../actors/prepare-context.js';
import type { SessionServices } from '../actors/session-services.js';
import { startRunActor } from '../actors/start-run.js';
import { toolCallActor } from '../actors/tool-call.js';
import type { Clock } from '../contracts/clock.js';
import { runMachine } from '../machines/run.machine.js';
import { sessionMachine, type PrepareInput, type PrepareOutput, type SessionInput, type SettleOutput } from '../machines/session.machine.js';
import type { ExecutionResult } from '../contracts/requests.js';
import { toolBatchMachine } from '../machines/tool-batch.machine.js';

/** A timer on `clock` that resolves with the time once `at` has passed; never without `at`. */
export const deadlineActor = (clock: Clock) =>
  fromPromise<number, { at?: number }>(
    ({ input, signal }) =>
      new Promise<number>((resolve) => {
        if (input.at === undefined) return;
        const t = clock.setTimeout(() => resolve(clock.now()), Math.max(0, input.at - clock.now()));
        signal.addEventListener('abort', () => clock.clearTimeout(t), { once: true });
      }),
  );

/**
 * The run machine with every phase actor bound to one session's services (what
 * `machine.provide({ actors })` swaps one by one in tests).
 */
export function runMachineFor(services: SessionServices) {
  return runMachine.provide({
    actors: {
      startRun: startRunActor(services),
      prepareContext: prepareContextActor(services),
      callModel: callModelActor(services),
      commitIntent: commitIntentActor(services),
      toolBatch: toolBatchMachine.provide({ actors: { toolCall: toolCallActor(services) } }),
      commitResults: commitResultsActor(services),
      verifyFinal: verifyFinalActor(services),
      commitFinal: commitFinalActor(services),
      deliverFinal: deliverFinalActor(services),
      endRun: endRunActor(services),
      deadline: deadlineActor(services.clock),
    },
  });
}

/** The session machine whose runs are bound to one session's services. */
export function sessionMachineFor(services: SessionServices) {
  return sessionMachine.provide({ actors: { run: runMachineFor(services) } });
}

/** What the facade does for the session machine's own actors. */
export interface SessionWork {
  prepare(input: PrepareInput): Promise<PrepareOutput>;
  settle(result: ExecutionResult): Promise<SettleOutput>;
  close(): Promise<void>;
}

/** The live session actor of one session: its machine bound to the services and the facade's work. */
export function createSessionActor(services: SessionServices, work: SessionWork, input: SessionInput, inspect?: (e: InspectionEvent) => void) {
  const machine = sessionMachineFor(services).provide({
    actors: {
      prepareAttempt: fromPromise<PrepareOutput, PrepareInput>(({ input }) => work.prepare(input)),
      settleAttempt: fromPromise<SettleOutput, { result: ExecutionResult }>(({ input }) => work.settle(input.result)),
      closeSession: fromPromise<void, void>(() => work.close()),
    },
  });
  return createActor(machine, { input, clock: services.clock, ...(inspect ? { inspect } : {}) });
}
