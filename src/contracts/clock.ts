import { randomUUID } from 'node:crypto';
import { z } from 'zod';

/**
 * The runtime's source of time (DESIGN: everything nondeterministic is injected): every timer,
 * deadline, backoff and timeout of the runtime goes through one. XState's `SimulatedClock` fits
 * it, so a test can drive a whole runtime's time by hand.
 * Contract: `now()` is milliseconds since the epoch; `setTimeout` calls `fn` once after `ms`.
 */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
}

/** The machine's own clock: `Date.now` and the global timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (id) => clearTimeout(id as ReturnType<typeof setTimeout>),
};

/**
 * The check of a `clock` option (runtime options, the subscriber hub), `systemClock` when left out.
 * @example
 * const Options = z.strictObject({ clock: ClockOption })
 */
export const ClockOption = z
  .custom<Clock>(
    (v) =>
      typeof v === 'object' &&
      v !== null &&
      (['now', 'setTimeout', 'clearTimeout'] as const).every((m) => typeof (v as Record<string, unknown>)[m] === 'function'),
    "a clock: { now(), setTimeout(fn, ms), clearTimeout(id) } (e.g. XState's SimulatedClock)",
  )
  .default(systemClock);

/**
 * Where the runtime's own ids come from: session instance ids and the event ids of records it does
 * not name itself. Contract: every call returns a new id, unique across processes (for `eventId`,
 * within its session at least).
 */
export interface IdSource {
  instanceId(): string;
  eventId(): string;
  /** Run and attempt ids the runtime makes when a request leaves them out (`session.run`); a UUID without it. */
  runId?(): string;
}

/** A run or attempt id the runtime makes: `ids.runId()`, else a UUID. */
export const newRunId = (ids: IdSource | undefined): string => ids?.runId?.() ?? randomUUID();

/** Sleeps `ms` on `clock`; rejects with `reason()` if `signal` aborts first. */
export function sleepOn(clock: Clock, ms: number, signal: AbortSignal, reason: () => unknown): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(reason());
    const onAbort = () => (clock.clearTimeout(t), reject(reason()));
    const t = clock.setTimeout(() => (signal.removeEventListener('abort', onAbort), resolve()), ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Resolves when `p` settles or after `ms` on `clock`, whichever is first. */
export function settledWithin(clock: Clock, p: Promise<unknown>, ms: number): Promise<void> {
  let timer: unknown;
  const late = new Promise<void>((resolve) => (timer = clock.setTimeout(resolve, ms)));
  return Promise.race([
    p.then(
      () => undefined,
      () => undefined,
    ),
    late,
  ]).finally(() => clock.clearTimeout(timer));
}
