import { fromCallback } from 'xstate';
import { isStoreClosedError } from '../contracts/errors.js';
import type { ClaimedSession } from '../persistence/work-store.js';
import { runLeftOpen } from '../persistence/open-run-read.js';
import { promiseActor } from './promise-actor.js';
import { messageOf, type WorkerServices } from './worker-services.js';

/** A lease to renew: the held incarnation, its session and the epoch the lease is bound to. */
export interface BoundLease {
  heldId: number;
  sessionId: string;
  writerEpoch: number;
}

/** What a renewal found: the sessions the store renewed (sent at `sentAt`), or why it failed (at `at`). */
export type RenewOutput =
  | { ok: true; sentAt: number; kept: string[]; bound: BoundLease[] }
  | { ok: false; at: number; message: string; storeClosed: boolean; bound: BoundLease[] };

/**
 * What a claim found: the sessions claimed, the worker's clock before the claim was sent, and how
 * many it asked for (a claim that came back full may have left more waiting).
 */
export type ClaimOutput = { claimed: ClaimedSession[]; sentAt: number; limit: number };

/** Registers the worker (its first heartbeat). */
export const registerWorkerActor = (s: WorkerServices) => promiseActor<void>(() => s.work.heartbeat(s.registration, s.options.leaseMs));

/**
 * Claims up to `limit` sessions with work; nothing while the runtime's kill switch is set. `sentAt`:
 * the worker's clock before the claim.
 */
export const claimSessionsActor = (s: WorkerServices) =>
  promiseActor<ClaimOutput, { limit: number }>(async ({ input }) => {
    const sentAt = s.clock.now();
    if (s.isKilled()) return { claimed: [], sentAt, limit: input.limit };
    const claimed = await s.work.claim(s.workerId, { limit: input.limit, leaseMs: s.options.leaseMs });
    for (const c of claimed) s.holds?.claimed(c.sessionId); // no await before: an app's open from now on is refused
    return { claimed, sentAt, limit: input.limit };
  });

/** Heartbeats and renews every bound lease in one statement; a failure is an output (each held session decides by its own deadline). */
export const renewLeasesActor = (s: WorkerServices) =>
  promiseActor<RenewOutput, { bound: BoundLease[] }>(async ({ input }) => {
    const sentAt = s.clock.now();
    try {
      await s.work.heartbeat(s.registration, s.options.leaseMs);
      if (input.bound.length === 0) return { ok: true, sentAt, kept: [], bound: [] };
      const kept = await s.work.renew(
        s.workerId,
        input.bound.map((b) => ({ sessionId: b.sessionId, writerEpoch: b.writerEpoch })),
        s.options.leaseMs,
      );
      return { ok: true, sentAt, kept, bound: input.bound };
    } catch (e) {
      return { ok: false, at: s.clock.now(), message: messageOf(e), storeClosed: isStoreClosedError(e), bound: input.bound };
    }
  });

/**
 * Gives a lease up (`writerEpoch` null: a claim never bound), with the resume mark when the
 * session's log has a run left open for the next worker (runLeftOpen, read right before the
 * release): a run detached at shutdown, one `runtime.close()` left where it stood, or — a claim
 * given back unbound (the session could not be opened, or the worker is stopping) took the store's
 * mark with it — one its last worker left. Else no worker would continue that run until some new
 * input came (found by the simulator's worker pools, test/sim). Resolves with the mark recorded.
 */
export const releaseLeaseActor = (s: WorkerServices) =>
  promiseActor<{ resume: boolean }, ReleaseInput>(async ({ input }) => {
    try {
      return await releaseLease(s, input);
    } finally {
      s.holds?.ended(input.sessionId); // a claim given back unopened (a held session's close ends the others)
    }
  });

export interface ReleaseInput {
  sessionId: string;
  writerEpoch: number | null;
}

/** The release itself: the log read for the resume mark, then the lease given up. */
async function releaseLease(s: WorkerServices, input: ReleaseInput): Promise<{ resume: boolean }> {
  const resume = await runLeftOpen(s.store, input.sessionId);
  await s.work.release(input.sessionId, s.workerId, input.writerEpoch, { resume });
  return { resume };
}

/** Removes the worker's registration at the end of a graceful stop (a failure is ignored: its heartbeat lapses). */
export const unregisterWorkerActor = (s: WorkerServices) =>
  promiseActor<void>(() => s.work.removeWorker(s.workerId).catch(() => undefined));

/** The store's wake-ups (`work.wakeups$`) as `WAKE` events to the worker. */
export const wakeupsActor = (s: WorkerServices) =>
  fromCallback<{ type: 'NONE' }>(({ sendBack }) => {
    const sub = s.work.wakeups$.subscribe((sessionId) => sendBack({ type: 'WAKE', sessionId }));
    return () => sub.unsubscribe();
  });
