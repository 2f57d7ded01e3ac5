import type { Clock } from '../contracts/clock.js';
import type { z } from 'zod';
import type { ServeEvent, ServeOptions } from '../contracts/inbox.js';
import type { EventStore } from '../persistence/event-store.js';
import type { WorkerRegistration, WorkStore } from '../persistence/work-store.js';
import type { Observable } from 'rxjs';
import type { InboxOutcome, StoredInboxEntry } from '../contracts/inbox.js';
import type { ExecutionRequest, ExecutionResult } from '../contracts/requests.js';
import type { Envelope } from '../streams/envelopes.js';

/** What a worker's effects use of an open session (the runtime's ExecutionSession). */
export interface ServedSession {
  readonly sessionInstanceId: string;
  readonly recovery: { writerEpoch: number };
  /** The session machine's actor: its state value says whether an attempt is under way. */
  readonly actor: { getSnapshot(): { value: unknown } };
  readonly events$: Observable<Envelope>;
  snapshot(): { status: string };
  execute(request: ExecutionRequest): Promise<ExecutionResult>;
  waitForIdle(): Promise<void>;
  requestDetach(): boolean;
  close(): Promise<void>;
}

/** What a worker's effects use of a session's inbox (the runtime's SessionInbox). */
export interface ServedInbox {
  drain(): Promise<void>;
  stopAfterRound(idempotencyKey: string): Promise<boolean>;
  readonly appliedListeners: Set<(entry: StoredInboxEntry, outcome: InboxOutcome) => void>;
}

/** What a serving worker passes when it opens a session it claimed. */
export interface OpenInternals {
  /** The lease check of the session's log writer (LogWriter.guard), given the epoch that writer attached with. */
  guard?: (writerEpoch: number) => unknown;
  /** The serving worker's id, recorded as the session's holder (SessionHeldError.holder.workerId). */
  workerId?: string;
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
  open(sessionId: string, internals: OpenInternals): Promise<ServedSession>;
  inboxFor(session: ServedSession): ServedInbox;
  isKilled(): boolean;
  /** The open session of each held incarnation. */
  readonly sessions: Map<number, ServedSession>;
  /** The unwatch of each open session's watch (held-session.ts), called at its close. */
  readonly watches: Map<number, () => void>;
  /** Publishes a serve event the worker machine does not make: each inbox entry applied (a watch's). */
  report(event: ServeEvent): void;
  /** Tells the runtime which sessions the worker holds, from its claim on (LiveSessions: an app's open of one is refused). */
  holds?: WorkerHolds;
}

/**
 * The sessions a worker holds, as its runtime sees them: `claimed` as the claim answers (before the
 * worker reports it or opens the session), `ended` once per claim as the incarnation ends — its
 * session closed, or its claim given back unopened.
 */
export interface WorkerHolds {
  claimed(sessionId: string): void;
  ended(sessionId: string): void;
}

export { messageOf } from './tool-call.js';

/** The session machine's phases in which an attempt is under way. */
export const isBusy = (s: ServedSession): boolean => {
  const p = String(s.actor.getSnapshot().value);
  return p === 'preparing' || p === 'executing' || p === 'finalizing';
};
