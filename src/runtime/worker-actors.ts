import { clockTimerActor } from '../actors/clock-timer.js';
import {
  closeHeldSessionActor,
  drainInboxActor,
  lookAtSessionActor,
  openHeldSessionActor,
  previousEndedActor,
  releaseSessionActor,
  resumeRunActor,
  sessionIdleActor,
  shutdownSessionActor,
} from '../actors/held-session.js';
import {
  claimSessionsActor,
  registerWorkerActor,
  releaseLeaseActor,
  renewLeasesActor,
  unregisterWorkerActor,
  wakeupsActor,
} from '../actors/worker-lease.js';
import type { WorkerServices } from '../actors/worker-services.js';
import { heldSessionMachine } from '../machines/held-session.machine.js';
import { workerMachine } from '../machines/worker.machine.js';

/** A held session's machine with every effect bound to the worker's services. */
export function heldSessionMachineFor(s: WorkerServices) {
  return heldSessionMachine.provide({
    actors: {
      previousEnded: previousEndedActor,
      openSession: openHeldSessionActor(s),
      resumeRun: resumeRunActor(s),
      drainInbox: drainInboxActor(s),
      lookAtSession: lookAtSessionActor(s),
      sessionIdle: sessionIdleActor(s),
      timer: clockTimerActor(s.clock),
      shutdownSession: shutdownSessionActor(s),
      closeSession: closeHeldSessionActor(s),
      releaseSession: releaseSessionActor(s),
      releaseLease: releaseLeaseActor(s),
    },
  });
}

/**
 * The worker machine with every effect bound to `s` (what `.provide({ actors })` swaps one by one
 * in tests and in the simulator).
 * @example
 * const worker = createActor(workerMachineFor(services), { input })
 */
export function workerMachineFor(s: WorkerServices, overrides: WorkerActorOverrides = {}) {
  return workerMachine.provide({
    actors: {
      heldSession: heldSessionMachineFor(s),
      wakeups: wakeupsActor(s),
      registerWorker: registerWorkerActor(s),
      claimSessions: claimSessionsActor(s),
      renewLeases: renewLeasesActor(s),
      unregisterWorker: unregisterWorkerActor(s),
      timer: clockTimerActor(s.clock),
      ...overrides,
    },
  });
}

/** Worker effects replaced by a test or the simulator (a seeded bug, a slower store). */
export interface WorkerActorOverrides {
  renewLeases?: ReturnType<typeof renewLeasesActor>;
  claimSessions?: ReturnType<typeof claimSessionsActor>;
}
