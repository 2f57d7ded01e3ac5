import { assign, sendParent, type AnyActorRef } from 'xstate';
import type { ServeEvent } from '../contracts/inbox.js';
import { messageOf } from '../actors/worker-services.js';
import { errorOf } from './run-decisions.js';

export interface HeldSessionInput {
  heldId: number;
  sessionId: string;
  workerId: string;
  /** The claim's deadline on the worker's clock (claim sent + leaseMs). */
  deadline: number;
  leaseMs: number;
  idleReleaseMs: number;
  /** How often the inbox is read again without a wake-up. */
  pollMs: number;
  /** The incarnation this one replaces (claimed again after its lease expired): it ends first. */
  previous?: AnyActorRef;
  /** The worker is stopping already: the claim is given back unopened. */
  stopping: boolean;
  graceMs: number;
}

export interface HeldSessionContext {
  heldId: number;
  sessionId: string;
  workerId: string;
  previous: AnyActorRef | undefined;
  /** The epoch the lease is bound to (the fencing token), once bound. */
  writerEpoch: number | null;
  /** By the worker's clock: past it the lease counts as lost. */
  deadline: number;
  /**
   * Why the lease is lost, once it is. Data, not a state: the loss can come in any state (a
   * renewal's answer, the worker's clock, a takeover) and each state acts on it at its own next
   * step; the lease guard throws with the reason.
   */
  lost: string | undefined;
  /**
   * The worker asked this session to stop: a STOP can come while it opens, binds or resumes, and
   * is honoured where it can be (`givingBack`, `bound.shuttingDown`), so it is remembered as data.
   */
  stopping: boolean;
  graceMs: number;
  /** A run of the open's first pass ended fenced while the open was still under way: routed at its end. */
  runFenced: boolean;
  /** The release follows a look that found it resting, nothing waiting, no run open: it skips reading the log. */
  rested: boolean;
  /** What the release recorded: the log had a run left open for the next worker (reported in `released`). */
  resume: boolean;
  leaseMs: number;
  idleReleaseMs: number;
  pollMs: number;
}

export type HeldSessionEvent =
  | { type: 'WAKE' }
  | { type: 'STOP'; graceMs: number }
  | { type: 'LEASE_RENEWED'; until: number }
  | { type: 'LEASE_NOT_RENEWED' }
  | { type: 'RENEWAL_FAILED'; at: number; message: string }
  | { type: 'LEASE_EXPIRED'; at: number }
  | { type: 'SUPERSEDED' }
  | { type: 'RUN_FENCED' }
  /** From the open's actor: the lease bound to its writer's epoch (`sentAt`: when the bind was sent), before its first pass. */
  | { type: 'LEASE_BOUND'; writerEpoch: number; sentAt: number }
  | { type: 'RUN_FAILED'; message: string };

/**
 * What a held session tells its worker while it runs: a serve event to publish, its lease bound
 * (the worker reports `attached`) or lost. Its end is its done event, with its output. (The inbox
 * entries applied are published by its watch, held-session.ts, not through the worker.)
 */
export type HeldSessionReport =
  | { type: 'held.report'; event: ServeEvent }
  | { type: 'held.bound'; heldId: number; sessionId: string; writerEpoch: number }
  | { type: 'held.lost'; heldId: number };

/**
 * A held session's output, which its done event carries to the worker: the incarnation, and the
 * serve event it ends on (`released`), if any.
 */
export interface HeldSessionOutput {
  heldId: number;
  event?: ServeEvent;
}

// What a held session reports to its worker, as actions of its machine (held-session.machine.ts).

/** Tells the worker (its parent): typed here, since XState types a parent's events loosely. */
export const toWorker = (make: (c: HeldSessionContext, event: HeldSessionEvent) => HeldSessionReport) =>
  sendParent(({ context, event }: { context: HeldSessionContext; event: HeldSessionEvent }) => make(context, event)) as never;
export const report = (make: (c: HeldSessionContext, event: HeldSessionEvent) => ServeEvent) =>
  toWorker((c, e) => ({ type: 'held.report', event: make(c, e) }));

export const failure = (prefix: string) =>
  report((c, event) => ({ type: 'error', workerId: c.workerId, sessionId: c.sessionId, message: `${prefix}${messageOf(errorOf(event))}` }));

/** A lease lost: why, reported once, and the worker stops renewing it. */
export const lose = (reason: (c: HeldSessionContext, event: HeldSessionEvent) => string) => [
  assign(({ context, event }: { context: HeldSessionContext; event: HeldSessionEvent }) => ({ lost: reason(context, event) })) as never,
  report((c) => ({ type: 'lease_lost', workerId: c.workerId, sessionId: c.sessionId, reason: c.lost! })),
  toWorker((c) => ({ type: 'held.lost', heldId: c.heldId })),
];
export const fenced = report((c) => ({ type: 'fenced', workerId: c.workerId, sessionId: c.sessionId, writerEpoch: c.writerEpoch! }));
