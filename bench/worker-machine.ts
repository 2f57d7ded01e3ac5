/**
 * bench/worker-machine: what the worker machine and its held sessions cost per session served,
 * before any store or run (docs/performance.md, "The worker machine"). The worker
 * (src/machines/worker.machine.ts) with every effect instant and fake: claims hand over as many
 * sessions as there is room for, each held session opens, binds, drains its inbox once to find
 * its attempt under way, waits for it (done at once), drains again to find it resting with nothing
 * waiting, and is released (closed, then its lease given up) — the path of every session of bench/serve. Rounds of
 * `WORKER_MACHINE_SESSIONS` sessions (32 at once) after a warm-up round; CPU µs per session,
 * median [min–max], and the actors started and events processed per session (counted in a round
 * of its own, as an inspector costs time).
 */
import { createActor, type AnyActorRef, type InspectionEvent } from 'xstate';
import { clockTimerActor } from '../src/actors/clock-timer.js';
import type { DrainOutput, OpenedSession, ReleaseSessionInput } from '../src/actors/held-session.js';
import type { BoundLease, RenewOutput } from '../src/actors/worker-lease.js';
import { promiseActor } from '../src/actors/promise-actor.js';
import { systemClock } from '../src/contracts/clock.js';
import { heldSessionMachine } from '../src/machines/held-session.machine.js';
import { workerMachine } from '../src/machines/worker.machine.js';
import { fmt, median, printTable } from './table.js';

const SESSIONS = Number(process.env.WORKER_MACHINE_SESSIONS ?? 10_000);
const ROUNDS = Number(process.env.WORKER_MACHINE_ROUNDS ?? 7);

/** The worker and held-session machines with instant effects (each held session: busy at its first look, resting empty at its second). */
function instantWorker(sessions: number) {
  let next = 0;
  const looks = new Map<number, number>();
  const pass = (heldId: number): DrainOutput => {
    const n = (looks.get(heldId) ?? 0) + 1;
    looks.set(heldId, n);
    return { outcome: 'drained', look: n === 1 ? { phase: 'busy' } : { phase: 'resting', pending: 0, runOpen: false } };
  };
  const held = heldSessionMachine.provide({
    actors: {
      // the open binds and makes the first pass, as the real one does (openHeldSessionActor)
      openSession: promiseActor(
        async ({ input }: { input: { heldId: number; sessionId: string; holder: AnyActorRef } }): Promise<OpenedSession> => {
          const sentAt = systemClock.now();
          input.holder.send({ type: 'LEASE_BOUND', writerEpoch: 1, sentAt });
          return { writerEpoch: 1, interrupted: false, bound: true, sentAt, ...pass(input.heldId) };
        },
      ),
      drainInbox: promiseActor(async ({ input }: { input: { heldId: number; sessionId: string } }) => pass(input.heldId)),
      sessionIdle: clockTimerActor(systemClock, () => Promise.resolve()),
      timer: clockTimerActor(systemClock),
      releaseSession: promiseActor(async ({ input }: { input: ReleaseSessionInput }) => {
        looks.delete(input.heldId);
        return { released: true as boolean, resume: false as boolean };
      }),
    },
  });
  return workerMachine.provide({
    actors: {
      heldSession: held,
      registerWorker: promiseActor(async () => {}),
      claimSessions: promiseActor(async ({ input }: { input: { limit: number } }) => {
        const claimed = [];
        for (let i = 0; i < input.limit && next < sessions; i++) claimed.push({ sessionId: `s${next++}`, expired: false });
        return { claimed, sentAt: systemClock.now(), limit: input.limit };
      }),
      renewLeases: promiseActor(
        async ({ input }: { input: { bound: BoundLease[] } }): Promise<RenewOutput> => ({
          ok: true,
          kept: input.bound.map((b) => b.sessionId),
          bound: input.bound,
          sentAt: systemClock.now(),
        }),
      ),
      unregisterWorker: promiseActor(async () => {}),
      timer: clockTimerActor(systemClock),
    },
  });
}

/** Serves `sessions` sessions; CPU µs per session. */
async function round(sessions: number, inspect?: (e: InspectionEvent) => void): Promise<number> {
  const actor = createActor(instantWorker(sessions), {
    ...(inspect ? { inspect } : {}),
    input: {
      workerId: 'bench',
      concurrency: 32,
      leaseMs: 15_000,
      pollMs: 200,
      heldPollMs: 200,
      idleReleaseMs: 0,
      shutdownGraceMs: 1000,
      startedAt: systemClock.now(),
    },
  });
  let released = 0;
  const done = new Promise<void>((resolve) =>
    actor.on('released', () => {
      if (++released >= sessions) resolve();
    }),
  );
  const cpu0 = process.cpuUsage();
  actor.start();
  await done;
  const cpu = process.cpuUsage(cpu0);
  actor.send({ type: 'STOP' });
  return (cpu.user + cpu.system) / sessions;
}

export async function benchWorkerMachine(): Promise<void> {
  await round(2000); // warm-up
  const samples: number[] = [];
  for (let r = 0; r < ROUNDS; r++) samples.push(await round(SESSIONS));
  let actors = 0;
  let events = 0;
  const counted = 2000;
  await round(counted, (e) => {
    if (e.type === '@xstate.actor') actors++;
    else if (e.type === '@xstate.event') events++;
  });
  printTable(
    ['machines', 'CPU µs per session served, median [min–max]', 'actors per session', 'events per session'],
    [
      [
        'worker + held sessions, instant effects',
        `${fmt(median(samples), 0)} [${fmt(Math.min(...samples), 0)}–${fmt(Math.max(...samples), 0)}]`,
        fmt(actors / counted, 1),
        fmt(events / counted, 1),
      ],
    ],
  );
  console.log(`\n${ROUNDS} rounds of ${SESSIONS} sessions, 32 at once (WORKER_MACHINE_SESSIONS, WORKER_MACHINE_ROUNDS).`);
}
