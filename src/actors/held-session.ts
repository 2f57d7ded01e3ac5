import { toPromise, type AnyActorRef } from 'xstate';
import { settledWithin } from '../contracts/clock.js';
import { isStoreClosedError, isWriterStopped } from '../contracts/errors.js';
import { LeaseLostError, type InboxEntry, type InboxOutcome, type StoredInboxEntry } from '../contracts/inbox.js';
import { clockTimerActor } from './clock-timer.js';
import { promiseActor } from './promise-actor.js';
import { isBusy, messageOf, type ServedSession, type WorkerServices } from './worker-services.js';
import { runLeftOpen } from '../persistence/open-run-read.js';
import type { ReleaseInput } from './worker-lease.js';

/** The part of a held session's actor the lease guard reads and tells (held-session.machine.ts). */
export interface LeaseHolder {
  getSnapshot(): { context: { lost?: string | undefined; deadline: number; stopping?: boolean } };
  send(event: { type: 'LEASE_EXPIRED'; at: number } | { type: 'LEASE_BOUND'; writerEpoch: number; sentAt: number }): void;
}

/** Why a lease counts as lost by the worker's own clock. */
export const expiredReason = (leaseMs: number) => `not renewed within ${leaseMs} ms by this worker's clock`;

/** Resolves once the incarnation before this one (a session claimed again after its lease expired) has ended. */
export const previousEndedActor = promiseActor<void, { previous?: AnyActorRef }>(async ({ input }) => {
  if (input.previous) await toPromise(input.previous).catch(() => undefined);
});

/**
 * A held session opened: the epoch its writer attached with; `interrupted`: its log has a run its
 * last worker left; `bound`: the lease bound to that epoch (`sentAt`: when the bind was sent, by
 * the worker's clock) — false when the store refused it or the lease was lost during the open;
 * then, when its first pass was made in the same actor, what it came to (DrainOutput's fields).
 */
export type OpenedSession = { writerEpoch: number; interrupted: boolean; bound: boolean; sentAt: number } & (
  | DrainOutput
  | { outcome?: undefined }
);

/**
 * Opens a claimed session with the lease guard on its log writer: checked before every commit,
 * tool start and delivery, it fences the writer once the lease is lost or past its deadline on the
 * worker's clock (and tells the held session so) — then binds the lease to the writer's epoch
 * (WorkStore.bind), unless the lease was lost meanwhile, and makes the session's first pass
 * (drainAndLook) unless it has a run to resume first, its lease is lost or the worker stops. One
 * actor for the three, as nearly every session a worker holds does them all (docs/performance.md,
 * "The worker machine").
 */
export const openHeldSessionActor = (s: WorkerServices) =>
  promiseActor<OpenedSession, { heldId: number; sessionId: string; holder: AnyActorRef }>(async ({ input }) => {
    const { sessionId } = input;
    const holder = input.holder as LeaseHolder;
    const guard = (writerEpoch: number): unknown => {
      const lease = holder.getSnapshot().context;
      if (lease.lost !== undefined) return new LeaseLostError(sessionId, writerEpoch, lease.lost);
      const now = s.clock.now();
      if (now <= lease.deadline) return undefined;
      holder.send({ type: 'LEASE_EXPIRED', at: now });
      return new LeaseLostError(sessionId, writerEpoch, expiredReason(s.options.leaseMs));
    };
    const session = await s.open(sessionId, { guard, workerId: s.workerId });
    s.sessions.set(input.heldId, session);
    s.watches.set(input.heldId, watch(s, sessionId, session, input.holder));
    const writerEpoch = session.recovery.writerEpoch;
    const interrupted = session.snapshot().status === 'detached';
    const sentAt = s.clock.now();
    if (holder.getSnapshot().context.lost !== undefined) return { writerEpoch, interrupted, bound: false, sentAt };
    const opened = { writerEpoch, interrupted, bound: await s.work.bind(sessionId, s.workerId, writerEpoch, s.options.leaseMs), sentAt };
    // bound: the held session's deadline is the bind's and the worker renews it, before the pass
    if (opened.bound) holder.send({ type: 'LEASE_BOUND', writerEpoch, sentAt });
    const lease = holder.getSnapshot().context;
    if (!opened.bound || interrupted || lease.lost !== undefined || lease.stopping) return opened;
    return { ...opened, ...(await drainAndLook(s, input.heldId, sessionId)) };
  });

/**
 * A run its worker left (died, lease expired, detached at shutdown) is continued as attempt
 * `resume-e<epoch>`; its failure comes back as `RUN_FAILED`.
 */
export const resumeRunActor = (s: WorkerServices) =>
  promiseActor<{ runId: string; attemptId: string } | null, { heldId: number; sessionId: string; writerEpoch: number; held: AnyActorRef }>(
    async ({ input }) => {
      const session = s.sessions.get(input.heldId);
      if (!session || session.snapshot().status !== 'detached' || s.isKilled()) return null;
      const runId = (await s.store.getHead(input.sessionId))?.openRun?.runId;
      if (!runId) return null;
      const attemptId = `resume-e${input.writerEpoch}`;
      session
        .execute({ kind: 'continue', runId, attemptId })
        .catch((e) => input.held.send({ type: 'RUN_FAILED', message: `continuing run ${runId} failed: ${messageOf(e)}` }));
      return { runId, attemptId };
    },
  );

/**
 * Where the session stands: over (fenced, closing, closed), running an attempt, or resting — with the
 * entries waiting (read only when resting) and whether it rests on a run left open (`detached`).
 */
export type SessionLook = { phase: 'ended' | 'busy' } | { phase: 'resting'; pending: number; runOpen: boolean };

/**
 * What applying the inbox came to and, unless its writer was fenced or the session closed, where
 * the session stands after it (a failed application is reported, the session goes on).
 */
export type DrainOutput =
  | { outcome: 'fenced' | 'closed' }
  | { outcome: 'drained'; look: SessionLook }
  | { outcome: 'failed'; message: string; look: SessionLook };

async function lookAt(s: WorkerServices, heldId: number, sessionId: string): Promise<SessionLook> {
  const before = s.sessions.get(heldId);
  if (!before || isOver(before) || isBusy(before)) return lookNow(s, heldId);
  const pending = (await s.work.pending(sessionId)).length;
  // where it stands read after the read of its entries (a run may have started meanwhile)
  return lookNow(s, heldId, pending);
}

function lookNow(s: WorkerServices, heldId: number, pending = 0): SessionLook {
  const session = s.sessions.get(heldId);
  if (!session || isOver(session)) return { phase: 'ended' };
  if (isBusy(session)) return { phase: 'busy' };
  return { phase: 'resting', pending, runOpen: String(session.actor.getSnapshot().value) === 'detached' };
}

const isOver = (session: ServedSession): boolean => {
  const phase = String(session.actor.getSnapshot().value);
  return phase === 'fenced' || phase === 'closed' || phase === 'closing';
};

/**
 * A pass of a held session: the inbox entries waiting applied (SessionInbox.drain), then a look at
 * where the session stands. A failed look after the drain is no pass: it throws.
 */
async function drainAndLook(s: WorkerServices, heldId: number, sessionId: string): Promise<DrainOutput> {
  const session = s.sessions.get(heldId);
  if (!session) return { outcome: 'closed' };
  let failed: string | undefined;
  try {
    await s.inboxFor(session).drain();
  } catch (e) {
    if (isWriterStopped(e)) return { outcome: 'fenced' };
    if (isStoreClosedError(e)) return { outcome: 'closed' };
    failed = `applying the inbox failed: ${messageOf(e)}`;
  }
  const look = await lookAt(s, heldId, sessionId);
  return failed === undefined ? { outcome: 'drained', look } : { outcome: 'failed', message: failed, look };
}

/** A pass after the first (drainAndLook): one actor for the drain and the look, as every pass does both. */
export const drainInboxActor = (s: WorkerServices) =>
  promiseActor<DrainOutput, { heldId: number; sessionId: string }>(({ input }) => drainAndLook(s, input.heldId, input.sessionId));

/** Where the session stands (an idle session's second look before it is released). */
export const lookAtSessionActor = (s: WorkerServices) =>
  promiseActor<SessionLook, { heldId: number; sessionId: string }>(({ input }) => lookAt(s, input.heldId, input.sessionId));

/**
 * Done when the session's attempt under way (if any) has ended, or after `ms` on the worker's
 * clock (the poll of its inbox), whichever comes first: one actor for the wait and its timer.
 */
export const sessionIdleActor = (s: WorkerServices) =>
  clockTimerActor<{ heldId: number; ms: number }>(s.clock, (input) => s.sessions.get(input.heldId)?.waitForIdle());

/**
 * At shutdown: a running attempt is asked to stop after its tool round (`stop_after_round`), then
 * detached after `graceMs`. Whether a run is left open is the release's to read from the log.
 */
export const shutdownSessionActor = (s: WorkerServices) =>
  promiseActor<void, { heldId: number; graceMs: number; holder: AnyActorRef }>(async ({ input }) => {
    const session = s.sessions.get(input.heldId);
    if (!session || !isBusy(session)) return;
    if (s.options.shutdown === 'stop_after_round') {
      await s
        .inboxFor(session)
        .stopAfterRound(`shutdown:${s.workerId}:${session.sessionInstanceId}`)
        .catch(() => undefined);
      await settledWithin(s.clock, session.waitForIdle(), input.graceMs);
    }
    if (isBusy(session) && (input.holder as LeaseHolder).getSnapshot().context.lost === undefined) {
      session.requestDetach();
      await settledWithin(s.clock, session.waitForIdle(), Math.max(1000, s.options.leaseMs / 2));
    }
  });

/** Closes a fenced session (its writer commits nothing more; its lease is left to expire): the worker's hold of it ends. */
export const closeHeldSessionActor = (s: WorkerServices) =>
  promiseActor<void, { heldId: number; sessionId: string }>(async ({ input }) => {
    try {
      await closeHeld(s, input.heldId);
    } finally {
      s.holds?.ended(input.sessionId);
    }
  });

async function closeHeld(s: WorkerServices, heldId: number): Promise<void> {
  const session = s.sessions.get(heldId);
  s.sessions.delete(heldId);
  s.watches.get(heldId)?.();
  s.watches.delete(heldId);
  await session?.close().catch(() => undefined);
}

/**
 * `rested`: the release follows a look that found the session resting with nothing waiting and no
 * run open; if it still rests so right before the close (a run an app's `runtime.submit` started in
 * this process meanwhile would show), the log is not read.
 */
export type ReleaseSessionInput = ReleaseInput & { heldId: number; holder: AnyActorRef; rested: boolean };

/**
 * A held session's end: closed (its writer commits nothing more), then its lease given up — unless
 * the lease was lost meanwhile (its holder, read after the close and the log's read: the last
 * await before the release), when it is only closed (`released: false`). One actor for the two, as
 * every session a worker ends does both (docs/performance.md, "The worker machine"). `resume`: what
 * the release recorded — unless `rested`, whether the log, read after the close, has a run left
 * open (runLeftOpen), whatever left it so: a detach at shutdown, or `runtime.close()` closing the
 * session under the worker. The worker's hold ends once the lease is given up (until then an app's
 * open is refused).
 */
export const releaseSessionActor = (s: WorkerServices) =>
  promiseActor<{ released: boolean; resume: boolean }, ReleaseSessionInput>(async ({ input }) => {
    try {
      // still resting with no run open, right before the close (runtime.submit can start a run in
      // this process after the look): else the log decides
      const now = lookNow(s, input.heldId);
      const rested = input.rested && now.phase === 'resting' && !now.runOpen;
      await closeHeld(s, input.heldId);
      const resume = rested ? false : await runLeftOpen(s.store, input.sessionId);
      if ((input.holder as LeaseHolder).getSnapshot().context.lost !== undefined) return { released: false, resume: false };
      await s.work.release(input.sessionId, s.workerId, input.writerEpoch, { resume });
      return { released: true, resume };
    } finally {
      s.holds?.ended(input.sessionId);
    }
  });

/**
 * From its open to its close, a held session's watch: each inbox entry applied is published
 * (`applied`, through the serve's events: no machine decides anything on it), and a run ended
 * `fenced` tells the held session (`RUN_FENCED`). Listeners, not an actor: a session has one
 * watch for its whole hold (docs/performance.md, "The worker machine"). Returns the unwatch.
 */
function watch(s: WorkerServices, sessionId: string, session: ServedSession, held: AnyActorRef): () => void {
  const sub = session.events$.subscribe({
    next: (env) => {
      if (env.event.type === 'execution_finished' && env.event.result.status === 'fenced') held.send({ type: 'RUN_FENCED' });
    },
  });
  const inbox = s.inboxFor(session);
  const onApplied = (entry: StoredInboxEntry, outcome: InboxOutcome) =>
    s.report({
      type: 'applied',
      workerId: s.workerId,
      sessionId,
      entryId: entry.entryId,
      kind: entry.entry.kind as InboxEntry['kind'],
      outcome,
    });
  inbox.appliedListeners.add(onApplied);
  return () => {
    sub.unsubscribe();
    inbox.appliedListeners.delete(onApplied);
  };
}
