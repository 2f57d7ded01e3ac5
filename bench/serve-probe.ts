/**
 * Counters of one serving worker process, for the serve bench (bench/serve.ts): loaded by the
 * worker child (test/crash/serve-child.ts `--probe`) and printed as one `PROBE <json>` line when
 * the parent asks. Everything here is a count or a CPU time, so it does not depend on how busy
 * the machine is: statements sent (by name, with their client-side time), serve events, appends
 * refused, idle waits, how full the worker kept its slots, its CPU time and event-loop delay.
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import pg from 'pg';
import type { ServeEvent } from '../src/contracts/inbox.js';
import type { EventStore } from '../src/persistence/event-store.js';
import type { WorkStore } from '../src/persistence/work-store.js';

export interface WorkerProbe {
  pid: number;
  /** Milliseconds from GO to the report. */
  wallMs: number;
  cpuUserMs: number;
  cpuSystemMs: number;
  /** Context switches (process.resourceUsage): waiting for I/O, and preempted for another process. */
  voluntarySwitches: number;
  involuntarySwitches: number;
  /** Event-loop delay (ms): mean and p99 while serving. */
  loopDelayMeanMs: number;
  loopDelayP99Ms: number;
  events: Record<string, number>;
  /** Statement name (or first words) → [count, total client-side ms]. */
  statements: Record<string, [number, number]>;
  /** append() failures by error name. */
  appendsRefused: Record<string, number>;
  /** work.claim calls, and those that found nothing (the worker then waits for a wake-up or pollMs). */
  claims: number;
  claimsEmpty: number;
  /** Mean sessions held (time-weighted) from GO to the worker's last claim, and the concurrency. */
  meanHeld: number;
  concurrency: number;
  /** Mean ms from a claim to its release. */
  meanHoldMs: number;
}

/** Statement names carry a per-store id (`actorloop_append_<id>`): keep the part that says what it is. */
const keyOf = (q: unknown): string => {
  if (typeof q === 'string') return q.replace(/\s+/g, ' ').slice(0, 28);
  const c = q as { name?: string; text?: string };
  if (c.name) return c.name.replace(/^actorloop_/, '').replace(/_[0-9a-z]+$/, '');
  return (c.text ?? '?').replace(/\s+/g, ' ').slice(0, 28);
};

/** Counts every query of every `pg.Client` in this process (call before the store connects). */
function countStatements(into: Record<string, [number, number]>): void {
  const proto = pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function (this: unknown, ...args: unknown[]) {
    const t = performance.now();
    const r = original.apply(this, args);
    const k = keyOf(args[0]);
    const done = () => {
      const s = (into[k] ??= [0, 0]);
      s[0]++;
      s[1] += performance.now() - t;
    };
    if (r && typeof (r as Promise<unknown>).then === 'function') (r as Promise<unknown>).then(done, done);
    return r;
  };
}

/** `BENCH_SERVE_CPU_PROF=<dir>`: each worker writes a CPU profile of its serving (GO to PROBE) there. */
const PROFILE_DIR = process.env.BENCH_SERVE_CPU_PROF;

const profiler = (() => {
  const session = new Session();
  return {
    async start(): Promise<void> {
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', { interval: 500 });
      await session.post('Profiler.start');
    },
    async stop(file: string): Promise<void> {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
})();

/** Starts counting; `report()` returns the counters since `start()`. */
export function workerProbe(store: EventStore, concurrency: number) {
  const statements: Record<string, [number, number]> = {};
  const appendsRefused: Record<string, number> = {};
  const events: Record<string, number> = {};
  countStatements(statements);
  const append = store.append.bind(store);
  store.append = async (...a: Parameters<EventStore['append']>) => {
    try {
      return await append(...a);
    } catch (e) {
      const name = (e as Error).name ?? 'Error';
      appendsRefused[name] = (appendsRefused[name] ?? 0) + 1;
      throw e;
    }
  };
  let claims = 0;
  let claimsEmpty = 0;
  const work = (store as EventStore & { work: WorkStore }).work;
  const claim = work.claim.bind(work);
  work.claim = async (...a: Parameters<WorkStore['claim']>) => {
    const r = await claim(...a);
    claims++;
    if (r.length === 0) claimsEmpty++;
    return r;
  };
  const delay = monitorEventLoopDelay({ resolution: 5 });
  let t0 = 0;
  let cpu0 = process.cpuUsage();
  let ru0 = process.resourceUsage();
  let held = 0;
  let heldSince = 0;
  let heldArea = 0;
  let lastClaim = 0;
  let areaAtLastClaim = 0;
  const claimedAt = new Map<string, number>();
  let holdMs = 0;
  let holds = 0;
  const step = (now: number, d: number) => {
    heldArea += held * (now - heldSince);
    heldSince = now;
    held += d;
  };
  return {
    start(): void {
      if (PROFILE_DIR) void profiler.start();
      // (what a warm-up or the store's first use sent does not count)
      for (const k of Object.keys(statements)) delete statements[k];
      claims = claimsEmpty = 0;
      t0 = heldSince = performance.now();
      cpu0 = process.cpuUsage();
      ru0 = process.resourceUsage();
      delay.enable();
    },
    onEvent(e: ServeEvent): void {
      events[e.type] = (events[e.type] ?? 0) + 1;
      const now = performance.now();
      if (e.type === 'claimed') {
        step(now, 1);
        claimedAt.set(e.sessionId, now);
        lastClaim = now;
        areaAtLastClaim = heldArea;
      } else if (e.type === 'released' || e.type === 'lease_lost') {
        step(now, -1);
        const c = claimedAt.get(e.sessionId);
        if (c !== undefined) {
          holdMs += now - c;
          holds++;
          claimedAt.delete(e.sessionId);
        }
      }
    },
    async report(): Promise<WorkerProbe> {
      if (PROFILE_DIR) await profiler.stop(join(PROFILE_DIR, `serve-worker-${process.pid}.cpuprofile`));
      delay.disable();
      const cpu = process.cpuUsage(cpu0);
      const ru = process.resourceUsage();
      return {
        voluntarySwitches: ru.voluntaryContextSwitches - ru0.voluntaryContextSwitches,
        involuntarySwitches: ru.involuntaryContextSwitches - ru0.involuntaryContextSwitches,
        pid: process.pid,
        wallMs: performance.now() - t0,
        cpuUserMs: cpu.user / 1000,
        cpuSystemMs: cpu.system / 1000,
        loopDelayMeanMs: delay.mean / 1e6,
        loopDelayP99Ms: delay.percentile(99) / 1e6,
        events,
        statements,
        appendsRefused,
        claims,
        claimsEmpty,
        meanHeld: lastClaim > t0 ? areaAtLastClaim / (lastClaim - t0) : 0,
        concurrency,
        meanHoldMs: holds ? holdMs / holds : 0,
      };
    },
  };
}
