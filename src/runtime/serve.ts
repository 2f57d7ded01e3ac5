import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Observable, Subject } from 'rxjs';
import { createActor, type InspectionEvent } from 'xstate';
import type { WorkerHolds, WorkerServices } from '../actors/worker-services.js';
import { systemClock, type Clock } from '../contracts/clock.js';
import { ServeOptions, type ServeEvent } from '../contracts/inbox.js';
import { parseInput } from '../contracts/validate.js';
import { z } from 'zod';
import type { EventStore } from '../persistence/event-store.js';
import type { WorkStore } from '../persistence/work-store.js';
import type { ExecutionSession } from './execution-session.js';
import type { SessionInbox } from './inbox.js';
import { workerMachineFor, type WorkerActorOverrides } from './worker-actors.js';

/** `ServeHandle.stop`'s options: `graceMs`, how long running sessions may go on before they are detached. */
const StopOptions = z.strictObject({ graceMs: z.number().nonnegative().optional() });
export type { OpenInternals } from '../actors/worker-services.js';
import type { OpenInternals } from '../actors/worker-services.js';

/** What `runtime.serve` returns. */
export interface ServeHandle {
  readonly workerId: string;
  /** Claims, attaches, applied entries, resumes, releases, lease losses, fencings, errors. */
  readonly events$: Observable<ServeEvent>;
  /** Subscribes a listener to `events$`; returns the unsubscribe function. */
  subscribe(listener: (event: ServeEvent) => void): () => void;
  /** Ids of the sessions this worker holds now. */
  readonly sessions: readonly string[];
  /**
   * Graceful shutdown: stops claiming, asks every running session to stop after its current tool
   * round (or, with `shutdown: 'detach'`, to detach at its next safe point), detaches those still
   * running after `graceMs` (their runs stay open for the next worker), releases every lease.
   * Resolves when done; a second call shares the first's.
   */
  stop(options?: { graceMs?: number }): Promise<void>;
  /** Resolves once the worker has stopped (after `stop()` or its `signal`). */
  readonly closed: Promise<void>;
}

export interface ServeDeps {
  /** The runtime's openSession, with the worker's lease guard. */
  open(sessionId: string, internals: OpenInternals): Promise<ExecutionSession>;
  store: EventStore;
  work: WorkStore;
  inboxFor(session: ExecutionSession): SessionInbox;
  isKilled(): boolean;
  /** The runtime's clock: the worker's timers and lease deadlines (the system clock: a monotonic one). */
  clock?: Clock;
  /** Sees the worker machine's and its held sessions' transitions (the runtime's `inspect`). */
  inspect?: (event: InspectionEvent) => void;
  /** Told which sessions the worker holds from its claim on (the runtime's LiveSessions). */
  holds?: (workerId: string) => WorkerHolds;
  /** Effects replaced (the simulator's seeded bugs); never set by the runtime. */
  actors?: (services: WorkerServices) => WorkerActorOverrides;
}

/** The system clock, but monotonic: a lease deadline must not move with the wall clock. */
const origin = performance.timeOrigin; // (a getter: read once, not at every lease check)
const monotonicClock: Clock = {
  now: () => origin + performance.now(),
  setTimeout: systemClock.setTimeout,
  clearTimeout: systemClock.clearTimeout,
};

/**
 * The worker of `runtime.serve` (docs/scale-out.md, "Serving"): a facade over the worker machine
 * (src/machines/worker.machine.ts), which claims sessions with work under leases, runs each
 * (inbox entries applied, an interrupted run continued) until it rests with nothing pending, and
 * releases it. A lease is bound to the writer epoch the worker attached with; it is renewed every
 * third of `leaseMs`, and counts as lost by the worker's own clock `leaseMs` after the renewal was
 * sent: from then on the session's writer is fenced (LeaseLostError) — no commit, no tool start,
 * no delivery — and the session is closed. The machine's emissions are the `ServeEvent`s (and
 * `applied`, which each held session's watch publishes).
 */
export function serve(deps: ServeDeps, options: ServeOptions = {}): ServeHandle {
  const o = parseInput(ServeOptions, options, 'runtime.serve');
  const { work } = deps;
  const workerId = o.workerId ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const clock = !deps.clock || deps.clock === systemClock ? monotonicClock : deps.clock;
  const events = new Subject<ServeEvent>();
  const services: WorkerServices = {
    workerId,
    options: o,
    registration: { workerId, host: hostname(), pid: process.pid, concurrency: o.concurrency },
    clock,
    store: deps.store,
    work,
    open: deps.open,
    inboxFor: deps.inboxFor,
    isKilled: deps.isKilled,
    sessions: new Map(),
    watches: new Map(),
    report: (e) => events.next(e),
    ...(deps.holds ? { holds: deps.holds(workerId) } : {}),
  };
  const worker = createActor(workerMachineFor(services, deps.actors?.(services)), {
    input: {
      workerId,
      concurrency: o.concurrency,
      leaseMs: o.leaseMs,
      pollMs: o.pollMs,
      // a held session's inbox: woken by wakeups$; polled at pollMs only where other processes'
      // submits send none (LMDB), else rarely, in case a notification was lost
      heldPollMs: work.wakesAcrossProcesses ? Math.max(o.pollMs, 5000) : o.pollMs,
      idleReleaseMs: o.idleReleaseMs,
      shutdownGraceMs: o.shutdownGraceMs,
      startedAt: clock.now(),
    },
    ...(deps.inspect ? { inspect: deps.inspect } : {}),
  });
  worker.on('*', (e) => events.next(e as ServeEvent));
  let resolveClosed!: () => void;
  const closed = new Promise<void>((r) => (resolveClosed = r));
  const finish = () => {
    events.complete();
    resolveClosed();
  };
  worker.subscribe({
    complete: finish,
    error: (e) => {
      events.next({ type: 'error', workerId, message: `the worker failed: ${e instanceof Error ? e.message : String(e)}` });
      finish();
    },
  });
  worker.start();

  const stop = (options?: { graceMs?: number }): Promise<void> => {
    let opts: z.output<typeof StopOptions>;
    try {
      opts = parseInput(StopOptions, options ?? {}, 'serve: stop');
    } catch (e) {
      return Promise.reject(e);
    }
    if (worker.getSnapshot().status === 'active')
      worker.send({ type: 'STOP', ...(opts.graceMs !== undefined ? { graceMs: opts.graceMs } : {}) });
    return closed;
  };
  if (o.signal) {
    const signal = o.signal;
    const onAbort = () => void stop();
    if (signal.aborted) onAbort();
    else {
      signal.addEventListener('abort', onAbort, { once: true });
      // however the worker ends, an app's long-lived signal keeps no listener (and so no worker) of it
      void closed.then(() => signal.removeEventListener('abort', onAbort));
    }
  }

  return {
    workerId,
    events$: events.asObservable(),
    subscribe(listener) {
      const sub = events.subscribe({ next: listener });
      return () => sub.unsubscribe();
    },
    get sessions() {
      return worker
        .getSnapshot()
        .context.held.filter((h) => h.lease !== 'superseded')
        .map((h) => h.sessionId);
    },
    stop,
    closed,
  };
}
