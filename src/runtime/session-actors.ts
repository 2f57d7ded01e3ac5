import { createActor, type ActorSystem, type InspectionEvent } from 'xstate';
import { promiseActor } from '../actors/promise-actor.js';
import { callModelActor } from '../actors/call-model.js';
import { commitIntentActor } from '../actors/commit-intent.js';
import { commitResultsActor, settleResultsActor } from '../actors/commit-results.js';
import { endRunActor } from '../actors/end-run.js';
import { cancelChildrenActor } from '../actors/cancel-children.js';
import { commitFinalActor, deliverFinalActor, verifyFinalActor } from '../actors/final-answer.js';
import { prepareContextActor } from '../actors/prepare-context.js';
import { servicesIn, type ServicesSource, type SessionServices } from '../actors/session-services.js';
import { startRunActor } from '../actors/start-run.js';
import { toolCallActor } from '../actors/tool-call.js';
import type { Clock } from '../contracts/clock.js';
import { runMachine } from '../machines/run.machine.js';
import {
  sessionMachine,
  type PrepareInput,
  type PrepareOutput,
  type SessionInput,
  type SettleOutput,
} from '../machines/session.machine.js';
import type { ExecutionResult } from '../contracts/requests.js';
import { toolBatchMachine } from '../machines/tool-batch.machine.js';

/**
 * A timer on `clock` that resolves once `at` has passed, with the time — at least `at`: a timer
 * may fire a millisecond before the clock reads `at` (Node's timers and `Date.now` round
 * differently), and its firing is what spends the budget. Never resolves without `at`.
 */
export const deadlineActor = (clockOf: (system: ActorSystem<any>) => Clock) =>
  promiseActor<number, { at?: number }>(
    ({ input, signal, system }) =>
      new Promise<number>((resolve) => {
        if (input.at === undefined) return;
        const clock = clockOf(system);
        const t = clock.setTimeout(() => resolve(Math.max(clock.now(), input.at!)), Math.max(0, input.at - clock.now()));
        signal.addEventListener('abort', () => clock.clearTimeout(t), { once: true });
      }),
  );

/** One session's services and the facade's work, registered with its session actor's system. */
interface SessionBinding {
  services: SessionServices;
  work: SessionWork;
}
const bindings = new WeakMap<ActorSystem<any>, SessionBinding>();

function bindingOf(system: ActorSystem<any>): SessionBinding {
  const b = bindings.get(system);
  if (!b) throw new Error('actorloop: a session actor ran outside a session (no services registered with its actor system)');
  return b;
}
const servicesOf = (system: ActorSystem<any>): SessionServices => bindingOf(system).services;

/**
 * The run machine with every phase actor bound to services — given (a test) or looked up from the
 * actor system the run runs in (what `machine.provide({ actors })` swaps one by one in tests).
 */
export function runMachineFor(services: ServicesSource) {
  return runMachine.provide({
    actors: {
      startRun: startRunActor(services),
      prepareContext: prepareContextActor(services),
      callModel: callModelActor(services),
      commitIntent: commitIntentActor(services),
      toolBatch: toolBatchMachine.provide({ actors: { toolCall: toolCallActor(services) } }),
      commitResults: commitResultsActor(services),
      settleResults: settleResultsActor(services),
      verifyFinal: verifyFinalActor(services),
      commitFinal: commitFinalActor(services),
      deliverFinal: deliverFinalActor(services),
      cancelChildren: cancelChildrenActor(services),
      endRun: endRunActor(services),
      deadline: deadlineActor((system) => servicesIn(services, system).clock),
    },
  });
}

/** The session machine whose runs are bound to `services`. */
export function sessionMachineFor(services: ServicesSource) {
  return sessionMachine.provide({ actors: { run: runMachineFor(services) } });
}

/** What the facade does for the session machine's own actors. */
export interface SessionWork {
  prepare(input: PrepareInput): Promise<PrepareOutput>;
  settle(result: ExecutionResult): Promise<SettleOutput>;
  close(): Promise<void>;
}

/**
 * The session machine with every actor bound once per process: each actor finds its session's
 * services and work through the actor system it runs in (a machine built per session would cost
 * more than a whole short run).
 */
const runtimeSessionMachine = sessionMachineFor(servicesOf).provide({
  actors: {
    prepareAttempt: promiseActor<PrepareOutput, PrepareInput>(({ input, system }) => bindingOf(system).work.prepare(input)),
    settleAttempt: promiseActor<SettleOutput, { result: ExecutionResult }>(({ input, system }) =>
      bindingOf(system).work.settle(input.result),
    ),
    closeSession: promiseActor<void, void>(({ system }) => bindingOf(system).work.close()),
  },
});

/** The live session actor of one session: the runtime's session machine, its system bound to the services and the facade's work. */
export function createSessionActor(
  services: SessionServices,
  work: SessionWork,
  input: SessionInput,
  inspect?: (e: InspectionEvent) => void,
) {
  const actor = createActor(runtimeSessionMachine, { input, clock: services.clock, ...(inspect ? { inspect } : {}) });
  bindings.set(actor.system, { services, work });
  return actor;
}
