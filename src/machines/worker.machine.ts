import { assign, emit, enqueueActions, fromCallback, fromPromise, raise, setup, type ActorRefFrom } from 'xstate';
import { isStoreClosedError } from '../contracts/errors.js';
import type { ServeEvent } from '../contracts/inbox.js';
import type { BoundLease, ClaimOutput, RenewOutput } from '../actors/worker-lease.js';
import { messageOf } from '../actors/worker-services.js';
import { heldSessionMachine, type HeldSessionOutput, type HeldSessionReport } from './held-session.machine.js';
import { notProvided } from './not-provided.js';
import { errorOf, outputOf } from './run-decisions.js';

export interface WorkerInput {
  workerId: string;
  concurrency: number;
  leaseMs: number;
  pollMs: number;
  /** How often a held session's inbox is read again without a wake-up. */
  heldPollMs: number;
  idleReleaseMs: number;
  shutdownGraceMs: number;
  /** The worker's clock when it starts (the first renewal is due a third of a lease later). */
  startedAt: number;
}

/** A session incarnation the worker holds (its actor runs `heldSessionMachine`). */
export interface HeldEntry {
  heldId: number;
  sessionId: string;
  ref: ActorRefFrom<typeof heldSessionMachine>;
  /** The epoch its lease is bound to, once bound (renewals carry it). */
  writerEpoch: number | null;
  /**
   * Where its lease stands, as the worker knows it: `claimed` (not bound yet), `bound` (renewed),
   * `lost` (its held session reported the loss: no longer renewed), `superseded` (claimed again
   * after its lease expired: a newer incarnation holds the session; this one only ends). The
   * held session's own machine has the states; this is the worker's record of them.
   */
  lease: 'claimed' | 'bound' | 'lost' | 'superseded';
}

export interface WorkerContext extends Omit<WorkerInput, 'startedAt'> {
  held: HeldEntry[];
  nextHeldId: number;
  /** Claims failed in a row (the poll backs off). */
  claimFailures: number;
  /** When the last renewal was sent, by the worker's clock. */
  renewedAt: number;
  renewEvery: number;
  stopping: boolean;
}

export type WorkerEvent =
  | { type: 'STOP'; graceMs?: number }
  | { type: 'WAKE'; sessionId: string }
  | { type: 'KICK' }
  | { type: 'STOPPING' }
  | HeldSessionReport;

/**
 * The actor id for a new held session: the lowest `held-<n>` no child has. Not its `heldId`: a
 * child's end reaches the worker as `xstate.done.actor.<id>`, and XState memoizes each state
 * node's transitions per event type for the machine's life — an id per session would grow the
 * worker's memo by an entry per state node for every session it ever served (more memory, and
 * a slower lookup, with every session). Reused ids keep the event types as few as the slots.
 */
function freeSlot(held: readonly HeldEntry[]): string {
  const used = new Set(held.map((h) => h.ref.id));
  let n = 0;
  while (used.has(`${HELD_PREFIX}${n}`)) n++;
  return `${HELD_PREFIX}${n}`;
}

const HELD_PREFIX = 'held-';
/** The id of the child a done or error event is about (`xstate.done.actor.<id>`, `xstate.error.actor.<id>`). */
const childIdOf = (event: { type: string }) => event.type.slice(event.type.indexOf('.actor.') + '.actor.'.length);

const holding = (c: WorkerContext) => c.held.filter((h) => h.lease !== 'superseded');
const room = (c: WorkerContext) => c.concurrency - holding(c).length;

/**
 * A serving worker (docs/scale-out.md, "Serving"; docs/architecture.md, "The worker"):
 * `registering` → `serving` (a registration the store refuses: `stopped`), where two regions run
 * side by side — `claims` (`claiming` sessions with work while there is room, `resting` until the
 * next poll or a wake-up) and `leases`
 * (`renewing` every bound lease a third of `leaseMs` after the last renewal was sent) — with one
 * `heldSessionMachine` child per session held. A stop ends the claims (`claims.stopped`): every
 * held session shuts down and is released; then `unregistering` → `stopped`. Every wait is a
 * timer actor on the worker's clock; the serve events are this machine's emissions (`applied`
 * aside: a held session's watch publishes it).
 * @example
 * const worker = createActor(workerMachine.provide({ actors: { claimSessions, renewLeases, heldSession, ... } }), { input })
 */
export const workerMachine = setup({
  types: { input: {} as WorkerInput, context: {} as WorkerContext, events: {} as WorkerEvent, emitted: {} as ServeEvent },
  actors: {
    heldSession: heldSessionMachine,
    wakeups: fromCallback<{ type: 'NONE' }>(() => {}),
    registerWorker: fromPromise<void, void>(notProvided('registerWorker')),
    claimSessions: fromPromise<ClaimOutput, { limit: number }>(notProvided('claimSessions')),
    renewLeases: fromPromise<RenewOutput, { bound: BoundLease[] }>(notProvided('renewLeases')),
    unregisterWorker: fromPromise<void, void>(notProvided('unregisterWorker')),
    timer: fromPromise<void, { ms?: number; at?: number }>(notProvided('timer')),
  },
  guards: {
    stopping: ({ context }) => context.stopping,
    hasRoom: ({ context }) => room(context) > 0,
    noneHeld: ({ context }) => context.held.length === 0,
    /**
     * The claim came back full: more may be waiting. Judged by what it asked for, not by the room
     * now — sessions that ended while it was under way left room it did not ask for, and their
     * endings came while claiming (no claim follows them otherwise until the poll).
     */
    claimedFull: ({ event }) => {
      const { claimed, limit } = outputOf<ClaimOutput>(event);
      return claimed.length > 0 && claimed.length >= limit;
    },
    storeClosed: ({ event }) => isStoreClosedError(errorOf(event)),
    /** A done or error event from a held session (not from one of the worker's own effects). */
    heldChild: ({ event }) => childIdOf(event).startsWith(HELD_PREFIX),
  },
  actions: {
    report: emit(({ context }, e: { event: Omit<ServeEvent, 'workerId'> }) => ({ ...e.event, workerId: context.workerId }) as ServeEvent),
    /** Each claimed session: reported, its expired incarnation (if held) superseded, a held-session actor started. */
    holdClaimed: enqueueActions(({ context, event, enqueue }) => {
      const { claimed, sentAt } = outputOf<ClaimOutput>(event);
      for (const c of claimed) {
        enqueue.emit({
          type: 'claimed',
          workerId: context.workerId,
          sessionId: c.sessionId,
          expired: c.expired,
          ...(c.previousOwner !== undefined ? { previousOwner: c.previousOwner } : {}),
        });
        const before = context.held.find((h) => h.sessionId === c.sessionId && h.lease !== 'superseded');
        if (before) enqueue.sendTo(before.ref, { type: 'SUPERSEDED' });
      }
      enqueue.assign(({ context: c, spawn }) => {
        let held = c.held;
        let nextHeldId = c.nextHeldId;
        for (const { sessionId } of claimed) {
          const before = held.find((h) => h.sessionId === sessionId && h.lease !== 'superseded');
          if (before) held = held.map((h) => (h === before ? { ...h, lease: 'superseded' as const } : h));
          const heldId = nextHeldId++;
          const id = freeSlot(held);
          const input = {
            heldId,
            sessionId,
            workerId: c.workerId,
            deadline: sentAt + c.leaseMs,
            leaseMs: c.leaseMs,
            idleReleaseMs: c.idleReleaseMs,
            pollMs: c.heldPollMs,
            stopping: c.stopping,
            graceMs: c.shutdownGraceMs,
            ...(before ? { previous: before.ref } : {}),
          };
          held = [
            ...held,
            {
              heldId,
              sessionId,
              ref: spawn('heldSession', { id, input }),
              writerEpoch: null,
              lease: 'claimed',
            },
          ];
        }
        return { held, nextHeldId, claimFailures: 0 };
      });
    }),
    /**
     * The store's answer to a renewal, to each held session: renewed until, not renewed, or the
     * failure (each judges by its own deadline).
     */
    spreadRenewal: enqueueActions(({ context, event, enqueue }) => {
      const r = outputOf<RenewOutput>(event);
      if (!r.ok && !r.storeClosed)
        enqueue.emit({ type: 'error', workerId: context.workerId, message: `renewing leases failed: ${r.message}` });
      const kept = new Set(r.ok ? r.kept : []);
      for (const b of r.bound) {
        const h = context.held.find((x) => x.heldId === b.heldId);
        if (!h) continue;
        if (!r.ok) enqueue.sendTo(h.ref, { type: 'RENEWAL_FAILED', at: r.at, message: r.message });
        else if (kept.has(b.sessionId)) enqueue.sendTo(h.ref, { type: 'LEASE_RENEWED', until: r.sentAt + context.leaseMs });
        else enqueue.sendTo(h.ref, { type: 'LEASE_NOT_RENEWED' });
      }
      enqueue.assign({ renewedAt: r.ok ? r.sentAt : r.at });
    }),
    wake: enqueueActions(({ context, event, enqueue }) => {
      const sessionId = (event as { sessionId: string }).sessionId;
      const h = context.held.find((x) => x.sessionId === sessionId && x.lease !== 'superseded');
      if (h) enqueue.sendTo(h.ref, { type: 'WAKE' });
      else enqueue.raise({ type: 'KICK' });
    }),
    /** A held session ended (done or failed): the serve event it ended on published, its entry dropped. */
    endHeld: enqueueActions(({ context, event, enqueue }) => {
      const id = childIdOf(event);
      const h = context.held.find((x) => x.ref.id === id);
      if (!h) return;
      const out = (event as { output?: HeldSessionOutput }).output;
      if (out?.event) enqueue.emit(out.event);
      enqueue.stopChild(h.ref); // (out of the worker's children: it stopped itself, its slot id is reused)
      enqueue.assign({ held: context.held.filter((x) => x !== h) });
    }),
    stopHeld: enqueueActions(({ context, enqueue }) => {
      for (const h of context.held) enqueue.sendTo(h.ref, { type: 'STOP', graceMs: context.shutdownGraceMs });
    }),
  },
}).createMachine({
  id: 'worker',
  context: ({ input }) => ({
    workerId: input.workerId,
    concurrency: input.concurrency,
    leaseMs: input.leaseMs,
    pollMs: input.pollMs,
    heldPollMs: input.heldPollMs,
    idleReleaseMs: input.idleReleaseMs,
    shutdownGraceMs: input.shutdownGraceMs,
    held: [],
    nextHeldId: 1,
    claimFailures: 0,
    renewedAt: input.startedAt,
    renewEvery: Math.max(20, Math.floor(input.leaseMs / 3)),
    stopping: false,
  }),
  invoke: { src: 'wakeups' },
  on: {
    STOP: [
      { guard: 'stopping', actions: assign({ shutdownGraceMs: ({ context, event }) => event.graceMs ?? context.shutdownGraceMs }) },
      {
        actions: [
          assign({ stopping: true, shutdownGraceMs: ({ context, event }) => event.graceMs ?? context.shutdownGraceMs }),
          { type: 'report', params: { event: { type: 'stopping' } } },
          raise({ type: 'STOPPING' }),
        ],
      },
    ],
    WAKE: { actions: 'wake' },
    'held.report': { actions: emit(({ event }) => event.event) },
    'held.bound': {
      actions: [
        emit(({ context, event }) => ({
          type: 'attached' as const,
          workerId: context.workerId,
          sessionId: event.sessionId,
          writerEpoch: event.writerEpoch,
        })),
        assign({
          held: ({ context, event }) =>
            context.held.map((h) =>
              h.heldId === event.heldId
                ? { ...h, writerEpoch: event.writerEpoch, lease: h.lease === 'claimed' ? ('bound' as const) : h.lease }
                : h,
            ),
        }),
      ],
    },
    'held.lost': {
      actions: assign({
        held: ({ context, event }) =>
          context.held.map((h) => (h.heldId === event.heldId && h.lease !== 'superseded' ? { ...h, lease: 'lost' as const } : h)),
      }),
    },
    // a held session's end: its done event (its output: the serve event it ends on, if any), or its failure
    'xstate.done.actor.*': { guard: 'heldChild', actions: ['endHeld', raise({ type: 'KICK' })] },
    'xstate.error.actor.*': {
      guard: 'heldChild',
      actions: [
        emit(({ context, event }) => ({
          type: 'error' as const,
          workerId: context.workerId,
          message: `a held session failed: ${messageOf(errorOf(event))}`,
        })),
        'endHeld',
        raise({ type: 'KICK' }),
      ],
    },
  },
  initial: 'registering',
  states: {
    registering: {
      invoke: {
        src: 'registerWorker',
        onDone: { target: 'serving', actions: { type: 'report', params: { event: { type: 'started' } } } },
        // a worker the store does not take (closed, unreachable) serves nothing: it says why and stops
        onError: {
          target: 'stopped',
          actions: emit(({ context, event }) => ({
            type: 'error' as const,
            workerId: context.workerId,
            message: `registering the worker failed: ${messageOf(errorOf(event))}; the worker stops`,
          })),
        },
      },
    },
    serving: {
      type: 'parallel',
      states: {
        claims: {
          initial: 'deciding',
          states: {
            deciding: {
              always: [{ guard: 'stopping', target: 'stopped' }, { guard: 'hasRoom', target: 'claiming' }, { target: 'resting' }],
            },
            claiming: {
              invoke: {
                src: 'claimSessions',
                input: ({ context }) => ({ limit: room(context) }),
                onDone: [
                  { guard: 'stopping', target: 'stopped', actions: 'holdClaimed' },
                  { guard: 'claimedFull', target: 'gathering', actions: 'holdClaimed' },
                  { target: 'resting', actions: 'holdClaimed' },
                ],
                onError: [
                  { guard: 'storeClosed', target: 'ended' },
                  {
                    target: 'resting',
                    actions: [
                      emit(({ context, event }) => ({
                        type: 'error' as const,
                        workerId: context.workerId,
                        message: `claiming failed: ${messageOf(errorOf(event))}`,
                      })),
                      assign({ claimFailures: ({ context }) => context.claimFailures + 1 }),
                    ],
                  },
                ],
              },
            },
            resting: {
              invoke: {
                src: 'timer',
                input: ({ context }) => ({
                  ms: context.claimFailures > 0 ? Math.min(context.pollMs * 2 ** context.claimFailures, 30_000) : context.pollMs,
                }),
                onDone: 'deciding',
              },
              on: { KICK: 'gathering', STOPPING: 'stopped' },
            },
            /**
             * Room was made (a held session ended, or a claim came back full) or a wake-up came for a
             * session not held: the next claim waits out this turn of the event loop (a 0 ms timer on
             * the clock), so that sessions ending together — released by one commit — make room for
             * one claim, not one each.
             */
            gathering: {
              invoke: { src: 'timer', input: { ms: 0 }, onDone: 'deciding' },
              on: { STOPPING: 'stopped' },
            },
            /** The store closed: no more claims. */
            ended: { on: { STOPPING: 'stopped' } },
            /** No more claims: every held session shuts down and is released. */
            stopped: {
              entry: 'stopHeld',
              always: { guard: 'noneHeld', target: '#worker.unregistering' },
            },
          },
        },
        leases: {
          initial: 'waiting',
          states: {
            waiting: {
              invoke: { src: 'timer', input: ({ context }) => ({ at: context.renewedAt + context.renewEvery }), onDone: 'renewing' },
            },
            renewing: {
              invoke: {
                src: 'renewLeases',
                input: ({ context }) => ({
                  bound: holding(context).flatMap((h) =>
                    h.lease === 'bound' && h.writerEpoch !== null
                      ? [{ heldId: h.heldId, sessionId: h.sessionId, writerEpoch: h.writerEpoch }]
                      : [],
                  ),
                }),
                onDone: { target: 'waiting', actions: 'spreadRenewal' },
              },
            },
          },
        },
      },
    },
    unregistering: { invoke: { src: 'unregisterWorker', onDone: 'stopped', onError: 'stopped' } },
    stopped: { type: 'final', entry: { type: 'report', params: { event: { type: 'stopped' } } } },
  },
});
