/**
 * The simulator's worker-pool family: several `runtime.serve` workers over one memory store,
 * every timer of every worker on one SimulatedClock (the store's lease clock too: `Date.now` is
 * the simulation's while a seed runs). The seed chooses the sessions and when their inputs
 * arrive, the workers (concurrency, a constant clock offset each), pauses of a worker's I/O longer
 * than the lease, crashes (a worker whose I/O never returns), a worker's runtime closed while a tool
 * of its runs (`runtime.close()`, as a SIGTERM handler's: its store calls fail from then on) and lost wake-ups. The pool runs by
 * itself until the simulated time is up; the invariants (pool-invariants.ts) are then checked on
 * the state it reached, with nothing nudged.
 */
import { setImmediate as immediate } from 'node:timers';
import { filter } from 'rxjs';
import { z } from 'zod';
import type { Clock } from '../../src/contracts/clock.js';
import type { LeaseInfo } from '../../src/contracts/inbox.js';
import { promiseActor } from '../../src/actors/promise-actor.js';
import type { BoundLease, RenewOutput } from '../../src/actors/worker-lease.js';
import type { WorkerServices } from '../../src/actors/worker-services.js';
import {
  createRuntime,
  defineTool,
  memoryStore,
  StoreClosedError,
  type EventStore,
  type Runtime,
  type ServeHandle,
} from '../../src/index.js';
import type { ExecutionSession } from '../../src/runtime/execution-session.js';
import { SessionInbox } from '../../src/runtime/inbox.js';
import { SERVED, type ServedInternals } from '../../src/runtime/live-sessions.js';
import { serve } from '../../src/runtime/serve.js';
import type { WorkerActorOverrides } from '../../src/runtime/worker-actors.js';
import type { WorkStore } from '../../src/persistence/work-store.js';
import { toolLoopModel } from '../helpers/serve-model.js';
import { PoolClock } from './pool-clock.js';
import { checkPool, type ToolStart } from './pool-invariants.js';
import { Prng } from './world.js';

/**
 * A seeded bug the pool invariants must catch: the worker counts a renewed lease from when the
 * store's answer arrived instead of from when the renewal was sent, so an answer delayed by a
 * pause stretches the worker's deadline past the store's expiry.
 */
export type PoolBroken = 'renew-from-answer';

const renewFromAnswer = (s: WorkerServices): WorkerActorOverrides => ({
  renewLeases: promiseActor<RenewOutput, { bound: BoundLease[] }>(async ({ input }) => {
    await s.work.heartbeat(s.registration, s.options.leaseMs);
    const kept =
      input.bound.length === 0
        ? []
        : await s.work.renew(
            s.workerId,
            input.bound.map((b) => ({ sessionId: b.sessionId, writerEpoch: b.writerEpoch })),
            s.options.leaseMs,
          );
    return { ok: true as const, sentAt: s.clock.now(), kept, bound: input.bound };
  }),
});

export interface PoolSeedResult {
  seed: number;
  violations: string[];
  trace: string[];
  stats: PoolStats;
}

/** What a pool seed exercised, each counted when it happened. */
export interface PoolStats {
  sessions: number;
  workers: number;
  /** Workers whose clock reads ahead of the simulation's (a constant offset). */
  skewed: number;
  pauses: number;
  /** Pauses longer than the lease. */
  longPauses: number;
  crashes: number;
  /** Wake-ups that never reached a worker. */
  lostWakeups: number;
  /** Workers whose runtime was closed (`runtime.close()`, a SIGTERM handler's) while a tool of theirs ran. */
  closes: number;
  takeovers: number;
  leaseLosses: number;
  /** When the pool came to rest (ms of simulated time), or END_MS. */
  simulatedMs: number;
}

const LEASE_MS = 300;
/** A seed ends once the pool has been at rest this long (every input in, nothing leased or pending, no worker paused)... */
const REST_MS = 2 * LEASE_MS;
/** ...or at this time, whatever the pool is doing (a starved session shows then). */
const END_MS = 30_000;
const STEP_MS = 10;
/** How often the driver looks whether the pool is at rest. */
const LOOK_MS = 100;

const STORE_CALLS = ['attachWriter', 'append', 'getHead', 'getEventById', 'loadSurface', 'loadStoredSurface', 'listSessions'] as const;
const WORK_CALLS = ['pending', 'getEntry', 'markApplied', 'claim', 'bind', 'renew', 'release', 'heartbeat', 'removeWorker'] as const;

/**
 * One worker's view of the store: its calls wait while it is paused (forever once crashed); some
 * wake-ups never reach it. Its `close` (its runtime's `runtime.close()`) closes this view only: its
 * calls fail with StoreClosedError from then on, as a closed LMDB handle's do.
 */
function workerStore(
  store: EventStore & { work: WorkStore },
  gate: () => Promise<void>,
  latency: () => Promise<void>,
  dropWakeup: () => boolean,
): EventStore & { work: WorkStore } {
  let closed = false;
  const open = () => {
    if (closed) throw new StoreClosedError("the worker's store");
  };
  const wrap = <T extends object>(target: T, names: readonly string[]): T => {
    const out = Object.create(target) as Record<string, unknown>;
    for (const name of names) {
      const f = (target as Record<string, unknown>)[name];
      if (typeof f !== 'function') continue;
      out[name] = async (...args: unknown[]) => {
        open();
        await gate();
        open();
        await latency(); // the request travels; a pause that starts meanwhile holds its answer
        const r = await (f as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        await gate(); // a pause may also come while the call is in flight: its answer arrives late
        return r;
      };
    }
    return out as T;
  };
  const work = wrap(store.work, WORK_CALLS) as WorkStore & Record<string, unknown>;
  Object.defineProperty(work, 'wakeups$', { value: store.work.wakeups$.pipe(filter(() => !dropWakeup())) });
  const s = wrap(store, STORE_CALLS) as EventStore & Record<string, unknown>;
  s.readEvents = async function* (...a: Parameters<EventStore['readEvents']>) {
    open();
    await gate();
    open();
    yield* store.readEvents(...a);
  };
  s.close = async () => {
    closed = true;
  };
  Object.defineProperty(s, 'work', { value: work });
  return s as EventStore & { work: WorkStore };
}

/**
 * Runs one pool seed. `pollMs`: every worker polls at this pace instead of the seed's choice (a
 * regression seed found that way; the seed's other choices are drawn as before).
 */
export async function runPoolSeed(o: { seed: number; broken?: PoolBroken; pollMs?: number }): Promise<PoolSeedResult> {
  const rng = new Prng(o.seed);
  const clock = new PoolClock(1_000_000);
  const realNow = Date.now;
  Date.now = () => clock.now();
  const trace: string[] = [];
  const stats: PoolStats = {
    sessions: 0,
    workers: 0,
    skewed: 0,
    pauses: 0,
    longPauses: 0,
    crashes: 0,
    lostWakeups: 0,
    closes: 0,
    takeovers: 0,
    leaseLosses: 0,
    simulatedMs: 0,
  };
  const pause = (until: { at: number }, ms: number) => {
    stats.pauses++;
    if (ms > LEASE_MS) stats.longPauses++;
    until.at = Math.max(until.at, clock.now() + ms);
  };
  const store = memoryStore();
  const starts: ToolStart[] = [];
  const leaseSnapshots: Promise<LeaseInfo[]>[] = [];
  const workerCount = 2 + rng.int(2);
  const sessions = Array.from({ length: 2 + rng.int(5) }, (_, i) => `s${i + 1}`);
  stats.sessions = sessions.length;
  stats.workers = workerCount;
  const crashed = new Set<number>();
  // the runtime.close() fault draws from a generator of its own: the other choices stay as before
  const closeRng = new Prng(o.seed ^ 0x5a17c1);
  /** Workers whose runtime was closed: out of the pool, as a crashed one, but failing rather than hanging. */
  const closed = new Set<number>();
  const crashesAhead = { n: 0 };
  const paused: { at: number }[] = [];
  let submitted = 0;
  const handles: ServeHandle[] = [];
  const runtimes: Runtime[] = [];
  try {
    for (let w = 0; w < workerCount; w++) {
      const pausedUntil = { at: 0 };
      paused.push(pausedUntil);
      const offset = rng.int(5) * 1000; // clock skew: a constant offset, which elapsed-time deadlines do not see
      if (offset > 0) stats.skewed++;
      const own: Clock = {
        now: () => clock.now() + offset,
        setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
        clearTimeout: (id) => clock.clearTimeout(id as never),
      };
      const gate = async () => {
        while (crashed.has(w) || clock.now() < pausedUntil.at) {
          if (crashed.has(w)) await new Promise(() => {});
          await new Promise<void>((r) => clock.setTimeout(r, pausedUntil.at - clock.now()));
        }
      };
      const lossy = rng.chance(0.3);
      const latency = () => new Promise<void>((r) => clock.setTimeout(r, rng.int(3) * 10));
      const pollMs = 50 + rng.int(4) * 50;
      const dropWakeup = () => lossy && rng.chance(0.5) && ++stats.lostWakeups > 0;
      const wStore = workerStore(store, gate, latency, dropWakeup);
      const workerId = `w${w + 1}`;
      const charge = defineTool({
        name: 'charge',
        description: '',
        parameters: z.object({ key: z.string() }),
        mode: 'exclusive',
        execute: async ({ key }, ctx) => {
          // the effect starts now: what the store says of the session's lease at this instant
          starts.push({ workerId, sessionId: ctx.sessionId, callId: ctx.callId, key, at: clock.now(), leases: store.work.listLeases() });
          // a fault while the worker holds the session: its I/O pauses (often past the lease), or it crashes
          if (rng.chance(0.25)) pause(pausedUntil, 100 + rng.int(10) * 100);
          else if (rng.chance(0.08) && crashed.size + closed.size < workerCount - 1 - crashesAhead.n) {
            stats.crashes++;
            crashed.add(w);
          } else if (closeRng.chance(0.1) && !crashed.has(w) && crashed.size + closed.size < workerCount - 1 - crashesAhead.n) {
            // its process is told to stop (a SIGTERM handler): runtime.close() with the worker serving
            stats.closes++;
            closed.add(w);
            void runtimes[w]!.close();
          }
          await new Promise<void>((r) => clock.setTimeout(r, 20 + rng.int(6) * 40));
          return `charged ${key}`;
        },
      });
      const runtime = createRuntime({
        store: wStore,
        model: toolLoopModel({ steps: 3, toolsPerStep: 1, tools: ['charge'] }),
        tools: [charge],
        clock: own,
      });
      runtimes.push(runtime);
      // runtime.serve's own wiring, with the seeded bug's effect swapped in when asked for
      const inboxes = new WeakMap<object, SessionInbox>();
      const handle = serve(
        {
          open: (sid, internals) =>
            (runtime.openSession as (id: string, i: ServedInternals) => Promise<ExecutionSession>)(sid, { ...internals, [SERVED]: true }),
          store: wStore,
          work: wStore.work,
          inboxFor: (session) =>
            inboxes.get(session) ?? inboxes.set(session, new SessionInbox(session, wStore, wStore.work, own)).get(session)!,
          isKilled: () => false,
          clock: own,
          ...(o.broken === 'renew-from-answer' ? { actors: renewFromAnswer } : {}),
        },
        // each worker polls at its own pace (50–200 ms), unless the seed is replayed with one
        { workerId, concurrency: 1 + rng.int(3), leaseMs: LEASE_MS, pollMs: o.pollMs ?? pollMs },
      );
      handle.subscribe((e) => {
        trace.push(
          `${clock.now() - 1_000_000} ${workerId} ${e.type}${'sessionId' in e && e.sessionId ? ` ${e.sessionId}` : ''}${e.type === 'lease_lost' ? ` (${e.reason})` : ''}${e.type === 'error' ? `: ${e.message}` : ''}`,
        );
        if (e.type === 'claimed' && e.expired) stats.takeovers++;
        if (e.type === 'lease_lost') stats.leaseLosses++;
      });
      handles.push(handle);
      // faults, chosen now, happening on the clock
      if (rng.chance(0.5)) {
        const at = 100 + rng.int(30) * 50;
        const ms = 100 + rng.int(10) * 100; // up to 1 s: most pauses outlive the 300 ms lease
        clock.setTimeout(() => pause(pausedUntil, ms), at);
      }
    }
    // at most all but one worker crash, so that someone can take the sessions over
    crashesAhead.n = rng.int(workerCount);
    for (let i = 0; i < crashesAhead.n; i++) {
      const w = i;
      clock.setTimeout(
        () => {
          crashesAhead.n--;
          // never the last worker standing
          if (crashed.size + closed.size < workerCount - 1 && !crashed.has(w) && !closed.has(w)) {
            stats.crashes++;
            crashed.add(w);
          }
        },
        150 + rng.int(20) * 50,
      );
    }
    for (const sid of sessions) {
      const at = rng.int(15) * 50;
      clock.setTimeout(() => {
        submitted++;
        void store.work.submit(sid, { kind: 'input', inputId: `${sid}-in`, mode: 'follow_up', message: sid });
      }, at);
    }
    // the pool runs by itself until it has rested REST_MS (every input in, no lease held or
    // expired, nothing pending or to resume, no live worker paused: nothing left for anyone to do)
    let restingSince: number | null = null;
    const start = clock.now();
    let nextLook = start;
    while (clock.now() - start < END_MS) {
      // the next step with a timer due (steps of STEP_MS from the start); the idle ones between change nothing
      const due = clock.nextDue() ?? Number.POSITIVE_INFINITY;
      clock.advanceTo(Math.min(start + END_MS, Math.max(clock.now() + STEP_MS, start + Math.ceil((due - start) / STEP_MS) * STEP_MS)));
      for (let i = 0; i < 4; i++) await new Promise((r) => immediate(r));
      if (clock.now() < nextLook) continue;
      nextLook = clock.now() + LOOK_MS;
      const resting =
        submitted === sessions.length &&
        paused.every((p, w) => crashed.has(w) || p.at <= clock.now()) &&
        (await store.work.listLeases()).length === 0;
      restingSince = resting ? (restingSince ?? clock.now()) : null;
      if (restingSince !== null && clock.now() - restingSince >= REST_MS) break;
    }
    stats.simulatedMs = clock.now() - start;
    const out = (id: string) => crashed.has(Number(id.slice(1)) - 1) || closed.has(Number(id.slice(1)) - 1);
    const violations = await checkPool({ store, sessions, starts, leaseSnapshots, live: (id) => !out(id) });
    return { seed: o.seed, violations, trace, stats };
  } finally {
    crashed.clear();
    for (let w = 0; w < workerCount; w++) crashed.add(w); // every worker's I/O stops: nothing more lands
    Date.now = realNow;
  }
}
