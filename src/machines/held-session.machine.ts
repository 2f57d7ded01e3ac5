import { and, assign, enqueueActions, fromPromise, not, setup, type AnyActorRef } from 'xstate';
import { isStoreClosedError } from '../contracts/errors.js';
import { expiredReason, type DrainOutput, type OpenedSession, type ReleaseSessionInput, type SessionLook } from '../actors/held-session.js';
import type { ReleaseInput } from '../actors/worker-lease.js';
import { notProvided } from './not-provided.js';
import { errorOf, outputOf } from './run-decisions.js';
import {
  failure,
  fenced,
  lose,
  report,
  toWorker,
  type HeldSessionContext,
  type HeldSessionEvent,
  type HeldSessionInput,
  type HeldSessionOutput,
} from './held-session-reports.js';
import type { ServeEvent } from '../contracts/inbox.js';

export type {
  HeldSessionContext,
  HeldSessionEvent,
  HeldSessionInput,
  HeldSessionOutput,
  HeldSessionReport,
} from './held-session-reports.js';

/** Where the session stands, from a drain's output (`draining`) or a look's (`idle.rechecking`). */
const lookOf = (event: unknown): SessionLook => {
  const out = outputOf<DrainOutput | SessionLook>(event);
  return 'outcome' in out ? (out as { look: SessionLook }).look : out;
};

/**
 * The lease bound to the writer epoch (LEASE_BOUND, sent by the open's actor right after the bind,
 * before its first pass): its deadline from the bind's send; the worker told (it reports
 * `attached` and renews it from now on).
 */
const bind = [
  assign({
    writerEpoch: ({ event }: { event: HeldSessionEvent }) => (event as { writerEpoch: number }).writerEpoch,
    deadline: ({ context, event }: { context: HeldSessionContext; event: HeldSessionEvent }) =>
      Math.max(context.deadline, (event as { sentAt: number }).sentAt + context.leaseMs),
  }) as never,
  'reportBound' as const,
];

/** The worker asked this session to stop (remembered: it is honoured where it can be). */
const stopAsked = assign({
  stopping: true,
  graceMs: ({ event }: { event: HeldSessionEvent }) => (event as { graceMs: number }).graceMs,
}) as never;

/** Released after a look that found it resting with nothing waiting: without a run open, the release need not read the log. */
const restedRelease = assign({
  rested: ({ event }: { event: HeldSessionEvent }) => {
    const look = lookOf(event);
    return look.phase === 'resting' && !look.runOpen;
  },
}) as never;

/**
 * Where a pass (drain and look: `bound.draining`'s, or the open's first) leads, each guard under
 * `when` (the open's: a pass was made): fenced, closed or ended → shut down; resting with nothing
 * waiting → released (at once, or after `idle`); else `waiting`.
 */
const afterPass = (when?: 'passMade') => {
  const guard = (g?: unknown) => (when === undefined ? g : g === undefined ? when : and([when, g as never]));
  return [
    { guard: guard(and(['drainFenced', 'lost'])), target: '#heldSession.releasing' },
    {
      guard: guard('drainFenced'),
      target: '#heldSession.closingFenced',
      actions: [fenced, ...lose(() => 'fenced while applying its inbox')],
    },
    { guard: guard('drainClosed'), target: '#heldSession.bound.shuttingDown' },
    { guard: guard('sessionEnded'), target: '#heldSession.bound.shuttingDown', actions: 'reportDrainFailed' },
    { guard: guard('stopping'), target: '#heldSession.bound.shuttingDown', actions: 'reportDrainFailed' },
    {
      guard: guard(and(['restsEmpty', 'releasesAtOnce'])),
      target: '#heldSession.releasing',
      actions: ['reportDrainFailed', restedRelease],
    },
    { guard: guard('restsEmpty'), target: '#heldSession.bound.idle', actions: 'reportDrainFailed' },
    { guard: guard(), target: '#heldSession.bound.waiting', actions: 'reportDrainFailed' },
  ] as never;
};

/** A bound session's next pass (from a sibling of `bound`'s states): shut down if the worker stops, else drain the inbox. */
const nextPass = [{ guard: 'stopping' as const, target: 'shuttingDown' }, { target: 'draining' }];

/**
 * One session a serving worker holds (docs/architecture.md, "The worker"): `claimed` (`queued`
 * behind the incarnation it replaces, if any) → `opening` (its writer attaches under the lease
 * guard, then the lease is bound to that writer epoch) → `bound`: `resuming` a run its last worker
 * left (if its log has one), then passes of `draining` its inbox and looking at where it stands,
 * `waiting` for its attempt, a wake-up or the poll, `idle` for `idleReleaseMs` — until it rests
 * with nothing waiting or the worker stops (`shuttingDown`) → `releasing` (closed, then its lease
 * given up) → `released`; or `releasing` → `lost` (closed, not released: the lease was lost), or
 * `closingFenced` → `fenced` (another writer attached: closed, its lease left to expire in the
 * store). The lease's deadline is context, renewed by the worker. Flat where it can be: each level
 * of states and each passing state costs every transition (docs/performance.md, "The worker machine").
 * @example
 * const held = createActor(heldSessionMachine.provide({ actors: { openSession, drainInbox, ... } }), { input })
 */
export const heldSessionMachine = setup({
  types: {
    input: {} as HeldSessionInput,
    context: {} as HeldSessionContext,
    events: {} as HeldSessionEvent,
    output: {} as HeldSessionOutput,
  },
  actors: {
    previousEnded: fromPromise<void, { previous?: AnyActorRef }>(notProvided('previousEnded')),
    openSession: fromPromise<OpenedSession, { heldId: number; sessionId: string; holder: AnyActorRef }>(notProvided('openSession')),
    resumeRun: fromPromise<
      { runId: string; attemptId: string } | null,
      { heldId: number; sessionId: string; writerEpoch: number; held: AnyActorRef }
    >(notProvided('resumeRun')),
    drainInbox: fromPromise<DrainOutput, { heldId: number; sessionId: string }>(notProvided('drainInbox')),
    lookAtSession: fromPromise<SessionLook, { heldId: number; sessionId: string }>(notProvided('lookAtSession')),
    sessionIdle: fromPromise<void, { heldId: number; ms: number }>(notProvided('sessionIdle')),
    timer: fromPromise<void, { ms?: number; at?: number }>(notProvided('timer')),
    shutdownSession: fromPromise<void, { heldId: number; graceMs: number; holder: AnyActorRef }>(notProvided('shutdownSession')),
    closeSession: fromPromise<void, { heldId: number; sessionId: string }>(notProvided('closeSession')),
    releaseSession: fromPromise<{ released: boolean; resume: boolean }, ReleaseSessionInput>(notProvided('releaseSession')),
    releaseLease: fromPromise<{ resume: boolean }, ReleaseInput>(notProvided('releaseLease')),
  },
  guards: {
    replaces: ({ context }) => context.previous !== undefined,
    lost: ({ context }) => context.lost !== undefined,
    stopping: ({ context }) => context.stopping,
    bound: ({ event }) => outputOf<{ bound: boolean }>(event).bound,
    resumed: ({ event }) => outputOf<unknown>(event) !== null,
    interrupted: ({ event }) => outputOf<OpenedSession>(event).interrupted,
    runFenced: ({ context }) => context.runFenced,
    released: ({ event }) => outputOf<{ released: boolean }>(event).released,
    pastDeadline: ({ context, event }) => (event as { at: number }).at > context.deadline,
    storeClosed: ({ event }) => isStoreClosedError(errorOf(event)),
    passMade: ({ event }) => outputOf<OpenedSession>(event).outcome !== undefined,
    drainFenced: ({ event }) => outputOf<DrainOutput>(event).outcome === 'fenced',
    drainClosed: ({ event }) => outputOf<DrainOutput>(event).outcome === 'closed',
    drainFailed: ({ event }) => outputOf<DrainOutput>(event).outcome === 'failed',
    sessionEnded: ({ event }) => lookOf(event).phase === 'ended',
    restsEmpty: ({ event }) => {
      const look = lookOf(event);
      return look.phase === 'resting' && look.pending === 0;
    },
    releasesAtOnce: ({ context }) => context.idleReleaseMs === 0,
  },
  actions: {
    reportResumed: report((c, event) => ({
      type: 'resumed',
      workerId: c.workerId,
      sessionId: c.sessionId,
      ...outputOf<{ runId: string; attemptId: string }>(event),
    })),
    reportRunFailed: report((c, e) => ({
      type: 'error',
      workerId: c.workerId,
      sessionId: c.sessionId,
      message: (e as { message: string }).message,
    })),
    /** A failed application of the inbox is reported; the session goes on by where it stands. */
    reportDrainFailed: enqueueActions(({ event, enqueue }) => {
      const drained = outputOf<DrainOutput>(event);
      if (drained.outcome === 'failed')
        enqueue(report((c) => ({ type: 'error', workerId: c.workerId, sessionId: c.sessionId, message: drained.message })));
    }),
    /** Bound: the worker reports `attached` and renews the lease from now on. */
    reportBound: toWorker((c) => ({ type: 'held.bound', heldId: c.heldId, sessionId: c.sessionId, writerEpoch: c.writerEpoch! })),
  },
}).createMachine({
  id: 'heldSession',
  // its end reaches the worker as the actor's done event: the incarnation, and the serve event it ends on
  output: ({ context, event }) => ({ heldId: context.heldId, ...(event.output ? { event: event.output as ServeEvent } : {}) }),
  context: ({ input }) => ({
    heldId: input.heldId,
    sessionId: input.sessionId,
    workerId: input.workerId,
    previous: input.previous,
    writerEpoch: null,
    deadline: input.deadline,
    lost: undefined,
    stopping: input.stopping,
    graceMs: input.graceMs,
    resume: false,
    runFenced: false,
    rested: false,
    leaseMs: input.leaseMs,
    idleReleaseMs: input.idleReleaseMs,
    pollMs: input.pollMs,
  }),
  initial: 'claimed',
  on: {
    STOP: { actions: stopAsked },
    LEASE_RENEWED: { guard: not('lost'), actions: assign({ deadline: ({ context, event }) => Math.max(context.deadline, event.until) }) },
    LEASE_NOT_RENEWED: {
      guard: not('lost'),
      actions: lose(() => 'the store did not renew it (expired, taken over, or another writer attached)'),
    },
    RENEWAL_FAILED: {
      guard: and([not('lost'), 'pastDeadline']),
      actions: lose((_, e) => `could not be renewed: ${(e as { message: string }).message}`),
    },
    LEASE_EXPIRED: { guard: not('lost'), actions: lose((c) => expiredReason(c.leaseMs)) },
    SUPERSEDED: { guard: not('lost'), actions: lose(() => 'claimed again after its lease expired') },
    RUN_FAILED: { actions: 'reportRunFailed' },
  },
  states: {
    claimed: {
      always: [{ guard: 'replaces', target: 'queued' }, { guard: 'stopping', target: 'givingBack' }, { target: 'opening' }],
    },
    /** Claimed again after its lease expired: the incarnation before this one ends first. */
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
        input: ({ context }) => ({ sessionId: context.sessionId, writerEpoch: null }),
        onDone: 'unopened',
        onError: 'unopened',
      },
    },
    /** Its writer attached under the lease guard, then the lease bound to that epoch (one actor). */
    opening: {
      invoke: {
        src: 'openSession',
        input: ({ context, self }) => ({ heldId: context.heldId, sessionId: context.sessionId, holder: self }),
        onDone: [
          { guard: 'lost', target: 'releasing' },
          // a run of its first pass ended fenced meanwhile (RUN_FENCED came while it opened)
          {
            guard: 'runFenced',
            target: 'closingFenced',
            actions: [fenced, ...lose(() => 'fenced: another writer attached to the session')],
          },
          { guard: and(['bound', 'interrupted']), target: 'bound.resuming' },
          // its first pass made by the open: where it leads (a stop meanwhile included)
          ...afterPass('passMade'),
          { guard: and(['bound', 'stopping']), target: 'bound.shuttingDown' },
          { guard: 'bound', target: 'bound.draining' },
          { target: 'releasing', actions: lose(() => 'the claim was lost before it was bound to the writer epoch') },
        ] as never,
        onError: [
          { guard: 'storeClosed', target: 'releasing' },
          { target: 'releasing', actions: failure('') },
        ],
      },
      on: {
        // bound before the first pass: renewed by the worker from now on
        LEASE_BOUND: { guard: not('lost'), actions: bind },
        RUN_FENCED: { actions: assign({ runFenced: true }) },
        // not bound yet: the lease the worker did not renew is the claim's, judged when the bind answers
        // (once bound, the root's handler judges it)
        LEASE_NOT_RENEWED: { guard: ({ context }) => context.writerEpoch === null },
      },
    },
    /** Its lease bound to the writer epoch (and renewed by the worker): the session is served. */
    bound: {
      always: { guard: 'lost', target: 'releasing' },
      on: {
        RUN_FENCED: { target: 'closingFenced', actions: [fenced, ...lose(() => 'fenced: another writer attached to the session')] },
        STOP: { target: '.shuttingDown', actions: stopAsked },
      },
      initial: 'draining',
      states: {
        /** Its log has a run its last worker left (died, lease expired, detached at shutdown): continued. */
        resuming: {
          on: { STOP: { actions: stopAsked } },
          invoke: {
            src: 'resumeRun',
            input: ({ context, self }) => ({
              heldId: context.heldId,
              sessionId: context.sessionId,
              writerEpoch: context.writerEpoch!,
              held: self,
            }),
            onDone: [
              { guard: and(['resumed', 'stopping']), target: 'shuttingDown', actions: 'reportResumed' },
              { guard: 'resumed', target: 'draining', actions: 'reportResumed' },
              ...nextPass,
            ],
            onError: [
              { guard: 'storeClosed', target: '#heldSession.releasing' },
              { target: '#heldSession.releasing', actions: failure('') },
            ],
          },
        },
        /** The inbox applied, then where the session stands (one actor): ended, resting, or running an attempt. */
        draining: {
          on: { STOP: { actions: stopAsked } },
          invoke: {
            src: 'drainInbox',
            input: ({ context }) => ({ heldId: context.heldId, sessionId: context.sessionId }),
            onDone: afterPass(),
            onError: [
              { guard: 'storeClosed', target: '#heldSession.releasing' },
              { target: '#heldSession.releasing', actions: failure('') },
            ],
          },
        },
        /** Until its attempt ends, a wake-up, or `pollMs` on the clock (one actor). */
        waiting: {
          invoke: {
            src: 'sessionIdle',
            input: ({ context }) => ({ heldId: context.heldId, ms: context.pollMs }),
            onDone: nextPass,
            onError: nextPass,
          },
          on: { WAKE: nextPass },
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
              { guard: 'restsEmpty', target: '#heldSession.releasing', actions: restedRelease },
              { guard: 'sessionEnded', target: '#heldSession.releasing' },
              ...nextPass,
            ],
            onError: [
              { guard: 'storeClosed', target: '#heldSession.releasing' },
              { target: '#heldSession.releasing', actions: failure('') },
            ],
          },
        },
        /** The worker stops: a running attempt stops after its round (or detaches); nothing runs otherwise. */
        shuttingDown: {
          always: { guard: not('stopping'), target: '#heldSession.releasing' },
          on: { STOP: {} },
          invoke: {
            src: 'shutdownSession',
            input: ({ context, self }) => ({ heldId: context.heldId, graceMs: context.graceMs, holder: self }),
            onDone: '#heldSession.releasing',
            onError: '#heldSession.releasing',
          },
        },
      },
    },
    /**
     * The session is closed (its writer commits nothing more), then its lease given up — or, lost
     * meanwhile, not (`lost`); a renewal that no longer finds the lease is no loss now.
     */
    releasing: {
      on: { LEASE_NOT_RENEWED: {} },
      invoke: {
        src: 'releaseSession',
        input: ({ context, self }) => ({
          heldId: context.heldId,
          sessionId: context.sessionId,
          writerEpoch: context.writerEpoch,
          holder: self,
          rested: context.rested,
        }),
        onDone: [
          { guard: 'released', target: 'released', actions: assign({ resume: ({ event }) => event.output.resume }) },
          { target: 'lost' },
        ],
        onError: { target: 'leftToExpire', actions: failure('releasing the lease failed (it expires by itself): ') },
      },
    },
    /** Another writer attached (the session's writer is fenced): the session is closed, its lease left to expire in the store. */
    closingFenced: {
      invoke: {
        src: 'closeSession',
        input: ({ context }) => ({ heldId: context.heldId, sessionId: context.sessionId }),
        onDone: 'fenced',
        onError: 'fenced',
      },
    },
    /** Released, with the resume mark the release recorded: the worker reports it. */
    released: {
      type: 'final',
      output: ({ context: c }) => ({ type: 'released' as const, workerId: c.workerId, sessionId: c.sessionId, resume: c.resume }),
    },
    /** The release failed: the lease expires in the store by itself. */
    leftToExpire: { type: 'final' },
    lost: { type: 'final' },
    fenced: { type: 'final' },
    unopened: { type: 'final' },
  },
});
