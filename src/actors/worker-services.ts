import type { Clock } from '../contracts/clock.js';
import type { z } from 'zod';
import type { ServeOptions } from '../contracts/inbox.js';
import type { EventStore } from '../persistence/event-store.js';
import type { WorkerRegistration, WorkStore } from '../persistence/work-store.js';
import type { ExecutionSession } from '../runtime/execution-session.js';
import type { SessionInbox } from '../runtime/inbox.js';

/** What a serving worker passes when it opens a session it claimed. */
export interface OpenInternals {
  /** The lease check of the session's log writer (LogWriter.guard), given the epoch that writer attached with. */
  guard?: (writerEpoch: number) => unknown;
}

/** `runtime.serve`'s options with their defaults. */
export type ResolvedServeOptions = z.output<typeof ServeOptions>;

/**
 * What the worker's effects work with (runtime/serve.ts makes one per `serve` call): the store's
 * leases and inbox, the runtime's openSession, and the worker's clock. The sessions a worker
 * holds are kept here by their incarnation's number (`heldId`), never in machine context.
 */

export interface WorkerServices {
  workerId: string;
  options: ResolvedServeOptions;
  registration: WorkerRegistration;
  /** Every timer and lease deadline of the worker (monotonic by default). */
  clock: Clock;
  store: EventStore;
  work: WorkStore;
  /** The runtime's openSession, with the worker's lease guard. */
  open(sessionId: string, internals: OpenInternals): Promise<ExecutionSession>;
  inboxFor(session: ExecutionSession): SessionInbox;
  isKilled(): boolean;
  /** The open session of each held incarnation. */
  readonly sessions: Map<number, ExecutionSession>;
}

export const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** The session machine's phases in which an attempt is under way. */
export const isBusy = (s: ExecutionSession): boolean => {
  const p = String(s.actor.getSnapshot().value);
  return p === 'preparing' || p === 'executing' || p === 'finalizing';
};
