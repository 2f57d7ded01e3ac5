import { and, assign, fromCallback, fromPromise, not, sendParent, setup, type AnyActorRef } from 'xstate';
import { isStoreClosedError } from '../contracts/errors.js';
import type { InboxEntry, InboxOutcome, ServeEvent } from '../contracts/inbox.js';
import { notProvided } from './not-provided.js';

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
  /** The epoch the session's writer attached with. */
  attachedEpoch: number | null;
  /** The epoch the lease is bound to (the fencing token), once bound. */
  writerEpoch: number | null;
  /** By the worker's clock: past it the lease counts as lost. */
  deadline: number;
  /** Why the lease is lost, once it is. */
  lost: string | undefined;
  fenced: boolean;
  stopping: boolean;
  graceMs: number;
  /** Release with a run left open for the next worker. */
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
  | { type: 'RUN_FAILED'; message: string }
  | { type: 'ENTRY_APPLIED'; entryId: string; kind: InboxEntry['kind']; outcome: InboxOutcome };

/** What a held session tells its worker: a serve event to publish, its lease bound or lost, its end. */
export type HeldSessionReport =
  | { type: 'held.report'; event: ServeEvent }
  | { type: 'held.bound'; heldId: number; sessionId: string; writerEpoch: number }
  | { type: 'held.lost'; heldId: number }
  | { type: 'held.ended'; heldId: number };

type Look = { phase: 'ended' | 'busy' } | { phase: 'resting'; pending: number };
type Drain = { outcome: 'drained' | 'fenced' | 'closed' } | { outcome: 'failed'; message: string };
const out = <T>(event: unknown) => (event as { output: T }).output;
const errorOf = (event: unknown) => (event as { error?: unknown }).error;
const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** Tells the worker (its parent): typed here, since XState types a parent's events loosely. */
const toWorker = (make: (c: HeldSessionContext, event: HeldSessionEvent) => HeldSessionReport) =>
  sendParent(({ context, event }: { context: HeldSessionContext; event: HeldSessionEvent }) => make(context, event)) as never;
const report = (make: (c: HeldSessionContext, event: HeldSessionEvent) => ServeEvent) =>
  toWorker((c, e) => ({ type: 'held.report', event: make(c, e) }));

const failure = (prefix: string) =>
  report((c, event) => ({ type: 'error', workerId: c.workerId, sessionId: c.sessionId, message: `${prefix}${messageOf(errorOf(event))}` }));

/** A lease lost: why, reported once, and the worker stops renewing it. */
const lose = (reason: (c: HeldSessionContext, event: HeldSessionEvent) => string) => [
  assign(({ context, event }: { context: HeldSessionContext; event: HeldSessionEvent }) => ({ lost: reason(context, event) })) as never,
  report((c) => ({ type: 'lease_lost', workerId: c.workerId, sessionId: c.sessionId, reason: c.lost! })),
  toWorker((c) => ({ type: 'held.lost', heldId: c.heldId })),
];
const fenced = report((c) => ({ type: 'fenced', workerId: c.workerId, sessionId: c.sessionId, writerEpoch: c.writerEpoch! }));

/**
 * One session a serving worker holds (docs/architecture.md, "The worker"): `queued` behind the
 * incarnation it replaces → `opening` (its writer attaches under the lease guard) → `binding` the
 * lease to that writer epoch → `bound`: `resuming` a run its last worker left, then `working` —
 * `draining` its inbox, `looking` at where it stands, `waiting` for its attempt or a wake-up,
 * `idle` for `idleReleaseMs` — until it rests with nothing waiting or the worker stops
 * (`shuttingDown`) → `closing` → `releasing` → `released`; or `lost` / `fenced` (closed, not
 * released: the lease expires in the store). The lease's deadline is context, renewed by the worker.
 * @example
 * const held = createActor(heldSessionMachine.provide({ actors: { openSession, bindLease, ... } }), { input })
 */
export const heldSessionMachine = setup({
  types: { input: {} as HeldSessionInput, context: {} as HeldSessionContext, events: {} as HeldSessionEvent },
  actors: {
    previousEnded: fromPromise<void, { previous?: AnyActorRef }>(notProvided('previousEnded')),
    openSession: fromPromise<{ writerEpoch: number }, { heldId: number; sessionId: string; holder: AnyActorRef }>(
      notProvided('openSession'),
    ),
    bindLease: fromPromise<{ bound: boolean; sentAt: number }, { sessionId: string; writerEpoch: number }>(notProvided('bindLease')),
    resumeRun: fromPromise<
      { runId: string; attemptId: string } | null,
      { heldId: number; sessionId: string; writerEpoch: number; held: AnyActorRef }
    >(notProvided('resumeRun')),
    watchSession: fromCallback<{ type: 'NONE' }, { heldId: number }>(() => {}),
    drainInbox: fromPromise<Drain, { heldId: number }>(notProvided('drainInbox')),
    lookAtSession: fromPromise<Look, { heldId: number; sessionId: string }>(notProvided('lookAtSession')),
    sessionIdle: fromPromise<void, { heldId: number }>(notProvided('sessionIdle')),
    timer: fromPromise<void, { ms?: number; at?: number }>(notProvided('timer')),
    shutdownSession: fromPromise<{ resume: boolean }, { heldId: number; graceMs: number; holder: AnyActorRef }>(
      notProvided('shutdownSession'),
    ),
    closeSession: fromPromise<{ detached: boolean }, { heldId: number }>(notProvided('closeSession')),
    releaseLease: fromPromise<void, { sessionId: string; writerEpoch: number | null; resume: boolean }>(notProvided('releaseLease')),
  },
  guards: {
    lost: ({ context }) => context.lost !== undefined,
    stopping: ({ context }) => context.stopping,
    fenced: ({ context }) => context.fenced,
    bound: ({ event }) => out<{ bound: boolean }>(event).bound,
    resumed: ({ event }) => out<unknown>(event) !== null,
    pastDeadline: ({ context, event }) => (event as { at: number }).at > context.deadline,
    storeClosed: ({ event }) => isStoreClosedError(errorOf(event)),
    drainFenced: ({ event }) => out<Drain>(event).outcome === 'fenced',
    drainClosed: ({ event }) => out<Drain>(event).outcome === 'closed',
    drainFailed: ({ event }) => out<Drain>(event).outcome === 'failed',
    sessionEnded: ({ event }) => out<Look>(event).phase === 'ended',
    restsEmpty: ({ event }) => {
      const look = out<Look>(event);
      return look.phase === 'resting' && look.pending === 0;
    },
    releasesAtOnce: ({ context }) => context.idleReleaseMs === 0,
  },
  actions: {
    reportAttached: report((c) => ({ type: 'attached', workerId: c.workerId, sessionId: c.sessionId, writerEpoch: c.writerEpoch! })),
    reportResumed: report((c, event) => ({
      type: 'resumed',
      workerId: c.workerId,
      sessionId: c.sessionId,
      ...out<{ runId: string; attemptId: string }>(event),
    })),
    reportApplied: report((c, e) => {
      const { entryId, kind, outcome } = e as Extract<HeldSessionEvent, { type: 'ENTRY_APPLIED' }>;
      return { type: 'applied', workerId: c.workerId, sessionId: c.sessionId, entryId, kind, outcome };
    }),
    reportRunFailed: report((c, e) => ({
      type: 'error',
      workerId: c.workerId,
      sessionId: c.sessionId,
      message: (e as { message: string }).message,
    })),
    reportDrainFailed: report((c, e) => ({
      type: 'error',
      workerId: c.workerId,
      sessionId: c.sessionId,
      message: (out<Drain>(e) as { message: string }).message,
    })),
    reportReleased: report((c) => ({ type: 'released', workerId: c.workerId, sessionId: c.sessionId, resume: c.resume })),
    reportBound: toWorker((c) => ({ type: 'held.bound', heldId: c.heldId, sessionId: c.sessionId, writerEpoch: c.writerEpoch! })),
    reportEnded: toWorker((c) => ({ type: 'held.ended', heldId: c.heldId })),
  },
}).createMachine({
  id: 'heldSession',
  context: ({ input }) => ({
    heldId: input.heldId,
    sessionId: input.sessionId,
    workerId: input.workerId,
    previous: input.previous,
    attachedEpoch: null,
    writerEpoch: null,
    deadline: input.deadline,
    lost: undefined,
    fenced: false,
    stopping: input.stopping,
    graceMs: input.graceMs,
    resume: false,
    leaseMs: input.leaseMs,
    idleReleaseMs: input.idleReleaseMs,
    pollMs: input.pollMs,
  }),
  initial: 'queued',
  on: {
    STOP: { actions: assign({ stopping: true, graceMs: ({ event }) => event.graceMs }) },
    LEASE_RENEWED: { guard: not('lost'), actions: assign({ deadline: ({ context, event }) => Math.max(context.deadline, event.until) }) },
    LEASE_NOT_RENEWED: {
      guard: not('lost'),
      actions: lose(() => 'the store did not renew it (expired, taken over, or another writer attached)'),
    },
    RENEWAL_FAILED: {
      guard: and([not('lost'), 'pastDeadline']),
      actions: lose((_, e) => `could not be renewed: ${(e as { message: string }).message}`),
    },
    LEASE_EXPIRED: { guard: not('lost'), actions: lose((c) => `not renewed within ${c.leaseMs} ms by this worker's clock`) },
    SUPERSEDED: { guard: not('lost'), actions: lose(() => 'claimed again after its lease expired') },
    RUN_FENCED: {
      guard: not('lost'),
      actions: [fenced, assign({ fenced: true }), ...lose(() => 'fenced: another writer attached to the session')],
    },
    RUN_FAILED: { actions: 'reportRunFailed' },
    ENTRY_APPLIED: { actions: 'reportApplied' },
  },
  states: {
    queued: {
      invoke: {
        src: 'previousEnded',
        input: ({ context }) => (context.previous ? { previous: context.previous } : {}),
        onDone: [{ guard: 'stopping', target: 'givingBack' }, { target: 'opening' }],
      },
    },
    /** Claimed while the worker stopped: the claim is released unopened. */
    givingBack: {
      invoke: {
        src: 'releaseLease',
        input: ({ context }) => ({ sessionId: context.sessionId, writerEpoch: null, resume: false }),
        onDone: 'unopened',
        onError: 'unopened',
      },
    },
    opening: {
      invoke: {
        src: 'openSession',
        input: ({ context, self }) => ({ heldId: context.heldId, sessionId: context.sessionId, holder: self }),
        onDone: [
          { guard: 'lost', target: 'closing' },
          { target: 'binding', actions: assign({ attachedEpoch: ({ event }) => event.output.writerEpoch }) },
        ],
        onError: [
          { guard: 'storeClosed', target: 'closing' },
          { target: 'closing', actions: failure('') },
        ],
      },
    },
    binding: {
      invoke: {
        src: 'bindLease',
        input: ({ context }) => ({ sessionId: context.sessionId, writerEpoch: context.attachedEpoch! }),
        onDone: [
          {
            guard: and(['bound', not('lost')]),
            target: 'bound',
            actions: [
              assign({
                writerEpoch: ({ context }) => context.attachedEpoch,
                deadline: ({ context, event }) => Math.max(context.deadline, event.output.sentAt + context.leaseMs),
              }),
              'reportAttached',
              'reportBound',
            ],
          },
          { target: 'closing', actions: lose(() => 'the claim was lost before it was bound to the writer epoch') },
        ],
        onError: [
          { guard: 'storeClosed', target: 'closing' },
          { target: 'closing', actions: failure('') },
        ],
      },
      // not bound yet: the lease the worker did not renew is the claim's, judged when the bind answers
      on: { LEASE_NOT_RENEWED: {} },
    },
    bound: {
      invoke: { src: 'watchSession', input: ({ context }) => ({ heldId: context.heldId }) },
      always: { guard: 'lost', target: 'closing' },
      initial: 'resuming',
      states: {
        resuming: {
          invoke: {
            src: 'resumeRun',
            input: ({ context, self }) => ({
              heldId: context.heldId,
              sessionId: context.sessionId,
              writerEpoch: context.writerEpoch!,
              held: self,
            }),
            onDone: [{ guard: 'resumed', target: 'working', actions: 'reportResumed' }, { target: 'working' }],
            onError: [
              { guard: 'storeClosed', target: '#heldSession.closing' },
              { target: '#heldSession.closing', actions: failure('') },
            ],
          },
        },
        working: {
          initial: 'deciding',
          on: { STOP: { target: '.shuttingDown', actions: assign({ stopping: true, graceMs: ({ event }) => event.graceMs }) } },
          states: {
            deciding: { always: [{ guard: 'stopping', target: 'shuttingDown' }, { target: 'draining' }] },
            draining: {
              on: { STOP: { actions: assign({ stopping: true, graceMs: ({ event }) => event.graceMs }) } },
              invoke: {
                src: 'drainInbox',
                input: ({ context }) => ({ heldId: context.heldId }),
                onDone: [
                  { guard: and(['drainFenced', 'lost']), target: '#heldSession.closing' },
                  {
                    guard: 'drainFenced',
                    target: '#heldSession.closing',
                    actions: [fenced, assign({ fenced: true }), ...lose(() => 'fenced while applying its inbox')],
                  },
                  { guard: 'drainClosed', target: 'shuttingDown' },
                  { guard: 'drainFailed', target: 'looking', actions: 'reportDrainFailed' },
                  { target: 'looking' },
                ],
              },
            },
            looking: {
              on: { STOP: { actions: assign({ stopping: true, graceMs: ({ event }) => event.graceMs }) } },
              invoke: {
                src: 'lookAtSession',
                input: ({ context }) => ({ heldId: context.heldId, sessionId: context.sessionId }),
                onDone: [
                  { guard: 'sessionEnded', target: 'shuttingDown' },
                  { guard: 'stopping', target: 'shuttingDown' },
                  { guard: and(['restsEmpty', 'releasesAtOnce']), target: '#heldSession.closing' },
                  { guard: 'restsEmpty', target: 'idle' },
                  { target: 'waiting' },
                ],
                onError: [
                  { guard: 'storeClosed', target: '#heldSession.closing' },
                  { target: '#heldSession.closing', actions: failure('') },
                ],
              },
            },
            waiting: {
              invoke: [
                { src: 'sessionIdle', input: ({ context }) => ({ heldId: context.heldId }), onDone: 'deciding', onError: 'deciding' },
                { src: 'timer', input: ({ context }) => ({ ms: context.pollMs }), onDone: 'deciding' },
              ],
              on: { WAKE: 'deciding' },
            },
            idle: {
              invoke: { src: 'timer', input: ({ context }) => ({ ms: context.idleReleaseMs }), onDone: 'rechecking' },
              on: { WAKE: 'rechecking' },
            },
            rechecking: {
              invoke: {
                src: 'lookAtSession',
                input: ({ context }) => ({ heldId: context.heldId, sessionId: context.sessionId }),
                onDone: [
                  { guard: 'restsEmpty', target: '#heldSession.closing' },
                  { guard: 'sessionEnded', target: '#heldSession.closing' },
                  { target: 'deciding' },
                ],
                onError: [
                  { guard: 'storeClosed', target: '#heldSession.closing' },
                  { target: '#heldSession.closing', actions: failure('') },
                ],
              },
            },
            /** The worker stops: a running attempt stops after its round (or detaches); nothing runs otherwise. */
            shuttingDown: {
              always: { guard: not('stopping'), target: '#heldSession.closing' },
              on: { STOP: {} },
              invoke: {
                src: 'shutdownSession',
                input: ({ context, self }) => ({ heldId: context.heldId, graceMs: context.graceMs, holder: self }),
                onDone: { target: '#heldSession.closing', actions: assign({ resume: ({ event }) => event.output.resume }) },
                onError: '#heldSession.closing',
              },
            },
          },
        },
      },
    },
    /** The session is closed (its writer commits nothing more); a renewal that no longer finds the lease is no loss now. */
    closing: {
      on: { LEASE_NOT_RENEWED: {} },
      invoke: {
        src: 'closeSession',
        input: ({ context }) => ({ heldId: context.heldId }),
        onDone: [
          { guard: 'fenced', target: 'fenced' },
          { guard: 'lost', target: 'lost' },
          { target: 'releasing', actions: assign({ resume: ({ context, event }) => context.resume || event.output.detached }) },
        ],
        onError: [{ guard: 'lost', target: 'lost' }, { target: 'releasing' }],
      },
    },
    releasing: {
      on: { LEASE_NOT_RENEWED: {} },
      invoke: {
        src: 'releaseLease',
        input: ({ context }) => ({ sessionId: context.sessionId, writerEpoch: context.writerEpoch, resume: context.resume }),
        onDone: { target: 'released', actions: 'reportReleased' },
        onError: { target: 'released', actions: failure('releasing the lease failed (it expires by itself): ') },
      },
    },
    released: { type: 'final', entry: 'reportEnded' },
    lost: { type: 'final', entry: 'reportEnded' },
    fenced: { type: 'final', entry: 'reportEnded' },
    unopened: { type: 'final', entry: 'reportEnded' },
  },
});
