import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Observable, Subject } from 'rxjs';
import { isStaleWriterError, isStoreClosedError } from '../contracts/errors.js';
import { LeaseLostError, ServeOptions, type InboxOutcome, type ServeEvent, type StoredInboxEntry } from '../contracts/inbox.js';
import { parseInput } from '../contracts/validate.js';
import type { EventStore } from '../persistence/event-store.js';
import type { ClaimedSession, WorkStore } from '../persistence/work-store.js';
import type { ExecutionSession } from './execution-session.js';
import type { SessionInbox } from './inbox.js';

/** What `runtime.serve` returns. */
export interface ServeHandle {
  readonly workerId: string;
  /** Claims, attaches, applied entries, resumes, releases, lease losses, fencings, errors. */
  readonly events$: Observable<ServeEvent>;
  /** Subscribes a listener to `events$`; returns the unsubscribe function. */
  subscribe(listener: (event: ServeEvent) => void): () => void;
  /** Ids of the sessions this worker holds now. */
  readonly sessions: readonly string[];
  /**
   * Graceful shutdown: stops claiming, asks every running session to stop after its current tool
   * round (or, with `shutdown: 'detach'`, to detach at its next safe point), detaches those still
   * running after `graceMs` (their runs stay open for the next worker), releases every lease. Resolves when done; a second call shares the first's.
   */
  stop(options?: { graceMs?: number }): Promise<void>;
  /** Resolves once the worker has stopped (after `stop()` or its `signal`). */
  readonly closed: Promise<void>;
}

/** What a serving worker passes when it opens a session it claimed. */
export interface OpenInternals {
  /** The lease check of the session's log writer (LogWriter.guard), given the epoch that writer attached with. */
  guard?: (writerEpoch: number) => unknown;
}

export interface ServeDeps {
  /** The runtime's openSession, with the worker's lease guard. */
  open(sessionId: string, internals: OpenInternals): Promise<ExecutionSession>;
  store: EventStore;
  work: WorkStore;
  inboxFor(session: ExecutionSession): SessionInbox;
  isKilled(): boolean;
}

/** One session this worker holds. */
interface Held {
  sessionId: string;
  /** By this worker's monotonic clock: the lease counts as lost after it. */
  deadline: number;
  writerEpoch: number | null;
  session?: ExecutionSession;
  lost?: string;
  /** Wakes the session's loop (an inbox wake-up, a loss, a stop). */
  wake(): void;
  waiting?: () => void;
  done: Promise<void>;
  /** Being released: a renewal that no longer finds it is no loss. */
  releasing?: boolean;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e));

/**
 * The worker loop of `runtime.serve` (docs/scale-out.md, "Serving"): claims sessions with work
 * under leases, runs each (inbox entries applied, an interrupted run continued) until it rests
 * with nothing pending, and releases it. A lease is bound to the writer epoch the worker attached
 * with; it is renewed every third of `leaseMs`, and counts as lost by the worker's own clock
 * `leaseMs` after the renewal was sent: from then on the session's writer is fenced
 * (LeaseLostError) — no commit, no exclusive tool — and the session is closed.
 */
export function serve(deps: ServeDeps, options: ServeOptions = {}): ServeHandle {
  const o = parseInput(ServeOptions, options, 'runtime.serve');
  const { work } = deps;
  const workerId = o.workerId ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const events = new Subject<ServeEvent>();
  const emit = (e: ServeEvent) => events.next(e);
  const held = new Map<string, Held>();
  let stopping = false;
  let stopped: Promise<void> | undefined;
  let wakeClaims: (() => void) | undefined;
  const kickClaims = () => wakeClaims?.();
  const renewEvery = Math.max(20, Math.floor(o.leaseMs / 3));
  // a held session's inbox: woken by wakeups$; polled at pollMs only where other processes' submits
  // send none (LMDB), else rarely, in case a notification was lost
  const heldPollMs = work.wakesAcrossProcesses ? Math.max(o.pollMs, 5000) : o.pollMs;
  const registration = { workerId, host: hostname(), pid: process.pid, concurrency: o.concurrency };

  const wakeSub = work.wakeups$.subscribe((sid) => {
    const h = held.get(sid);
    if (h) h.wake();
    else kickClaims();
  });

  const lose = (h: Held, reason: string) => {
    if (h.lost) return;
    h.lost = reason;
    emit({ type: 'lease_lost', workerId, sessionId: h.sessionId, reason });
    // its writer is fenced from now on (guard); closing stops the run where it stands
    void h.session?.close();
    h.wake();
  };

  const guardFor = (h: Held) => (writerEpoch: number): unknown => {
    if (h.lost) return new LeaseLostError(h.sessionId, writerEpoch, h.lost);
    if (performance.now() > h.deadline) {
      lose(h, `not renewed within ${o.leaseMs} ms by this worker's clock`);
      return new LeaseLostError(h.sessionId, writerEpoch, h.lost!);
    }
    return undefined;
  };

  async function renewAll(): Promise<void> {
    const bound = [...held.values()].filter((h) => h.writerEpoch !== null && !h.lost);
    const sentAt = performance.now();
    try {
      await work.heartbeat(registration, o.leaseMs);
      if (bound.length === 0) return;
      const kept = new Set(await work.renew(workerId, bound.map((h) => ({ sessionId: h.sessionId, writerEpoch: h.writerEpoch! })), o.leaseMs));
      for (const h of bound) {
        if (kept.has(h.sessionId)) h.deadline = Math.max(h.deadline, sentAt + o.leaseMs);
        else if (!h.releasing) lose(h, 'the store did not renew it (expired, taken over, or another writer attached)');
      }
    } catch (e) {
      if (!isStoreClosedError(e)) emit({ type: 'error', workerId, message: `renewing leases failed: ${messageOf(e)}` });
      for (const h of bound) if (performance.now() > h.deadline) lose(h, `could not be renewed: ${messageOf(e)}`);
    }
  }

  async function runSession(h: Held): Promise<void> {
    const sid = h.sessionId;
    let resume = false;
    let session: ExecutionSession | undefined;
    let cleanup = () => {};
    try {
      const internals: OpenInternals = { guard: guardFor(h) };
      session = await deps.open(sid, internals);
      h.session = session;
      const epoch = session.recovery.writerEpoch;
      const sentAt = performance.now();
      if (h.lost || !(await work.bind(sid, workerId, epoch, o.leaseMs))) {
        lose(h, 'the claim was lost before it was bound to the writer epoch');
        return;
      }
      h.writerEpoch = epoch;
      h.deadline = Math.max(h.deadline, sentAt + o.leaseMs);
      emit({ type: 'attached', workerId, sessionId: sid, writerEpoch: epoch });
      const s = session;
      const finishSub = s.events$.subscribe({
        next: (env) => {
          if (env.event.type === 'execution_finished' && env.event.result.status === 'fenced' && !h.lost) {
            emit({ type: 'fenced', workerId, sessionId: sid, writerEpoch: epoch });
            lose(h, 'fenced: another writer attached to the session');
          }
        },
      });
      try {
        const inbox = deps.inboxFor(s);
        const onApplied = (entry: StoredInboxEntry, outcome: InboxOutcome) =>
          emit({ type: 'applied', workerId, sessionId: sid, entryId: entry.entryId, kind: entry.entry.kind, outcome });
        inbox.appliedListeners.add(onApplied);
        cleanup = () => inbox.appliedListeners.delete(onApplied);
        // a run its worker left (died, lease expired, detached at shutdown): continue it
        if (s.snapshot().status === 'detached' && !deps.isKilled()) {
          const runId = (await deps.store.getHead(sid))?.openRun?.runId;
          if (runId) {
            const attemptId = `resume-e${epoch}`;
            void s.execute({ kind: 'continue', runId, attemptId }).catch((e) => emit({ type: 'error', workerId, sessionId: sid, message: `continuing run ${runId} failed: ${messageOf(e)}` }));
            emit({ type: 'resumed', workerId, sessionId: sid, runId, attemptId });
          }
        }
        for (;;) {
          if (h.lost || stopping) break;
          try {
            await inbox.drain();
          } catch (e) {
            if (isStaleWriterError(e)) {
              if (!h.lost) emit({ type: 'fenced', workerId, sessionId: sid, writerEpoch: epoch });
              lose(h, 'fenced while applying its inbox');
              break;
            }
            if (isStoreClosedError(e)) break;
            emit({ type: 'error', workerId, sessionId: sid, message: `applying the inbox failed: ${messageOf(e)}` });
          }
          const phase = String(s.actor.getSnapshot().value);
          if (phase === 'fenced' || phase === 'closed' || phase === 'closing') break;
          const resting = phase !== 'preparing' && phase !== 'executing' && phase !== 'finalizing';
          if (resting && (await work.pending(sid)).length === 0) {
            if (o.idleReleaseMs === 0) break;
            await waitFor(h, [sleep(o.idleReleaseMs)]);
            if ((await work.pending(sid)).length === 0 && !busy(s)) break;
            continue;
          }
          await waitFor(h, [s.waitForIdle(), sleep(heldPollMs)]);
        }
        if (stopping && !h.lost) resume = await shutdownSession(h, s);
      } finally {
        finishSub.unsubscribe();
        cleanup();
      }
    } catch (e) {
      if (!isStoreClosedError(e)) emit({ type: 'error', workerId, sessionId: sid, message: messageOf(e) });
    } finally {
      h.releasing = true;
      const detached = session ? session.snapshot().status === 'detached' : false;
      await session?.close().catch(() => undefined);
      if (!h.lost) {
        try {
          await work.release(sid, workerId, h.writerEpoch, { resume: resume || detached });
          emit({ type: 'released', workerId, sessionId: sid, resume: resume || detached });
        } catch (e) {
          emit({ type: 'error', workerId, sessionId: sid, message: `releasing the lease failed (it expires by itself): ${messageOf(e)}` });
        }
      }
      if (held.get(sid) === h) held.delete(sid);
      kickClaims();
    }
  }

  /** At shutdown: a running attempt is asked to stop after its tool round, then detached after the grace time. */
  async function shutdownSession(h: Held, s: ExecutionSession): Promise<boolean> {
    if (!busy(s)) return false;
    if (o.shutdown === 'stop_after_round') {
      await deps
        .inboxFor(s)
        .stopAfterRound(`shutdown:${workerId}:${s.sessionInstanceId}`)
        .catch(() => undefined);
      await Promise.race([s.waitForIdle(), sleep(graceMs)]);
    }
    if (busy(s) && !h.lost) {
      s.requestDetach();
      await Promise.race([s.waitForIdle(), sleep(Math.max(1000, o.leaseMs / 2))]);
      return true;
    }
    return s.snapshot().status === 'detached';
  }

  let graceMs = o.shutdownGraceMs;

  function waitFor(h: Held, also: Promise<unknown>[]): Promise<void> {
    return new Promise<void>((resolve) => {
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        h.waiting = undefined;
        resolve();
      };
      h.waiting = finish;
      for (const p of also) void p.then(finish, finish);
    });
  }

  async function claimLoop(): Promise<void> {
    let failures = 0;
    while (!stopping) {
      let claimed: ClaimedSession[] = [];
      const room = o.concurrency - held.size;
      if (room > 0 && !deps.isKilled()) {
        const sentAt = performance.now();
        try {
          claimed = await work.claim(workerId, { limit: room, leaseMs: o.leaseMs });
          failures = 0;
        } catch (e) {
          if (isStoreClosedError(e)) break;
          emit({ type: 'error', workerId, message: `claiming failed: ${messageOf(e)}` });
          failures++;
        }
        for (const c of claimed) {
          emit({ type: 'claimed', workerId, sessionId: c.sessionId, expired: c.expired, ...(c.previousOwner !== undefined ? { previousOwner: c.previousOwner } : {}) });
          const before = held.get(c.sessionId);
          if (before) lose(before, 'claimed again after its lease expired');
          const h: Held = { sessionId: c.sessionId, deadline: sentAt + o.leaseMs, writerEpoch: null, wake: () => h.waiting?.(), done: Promise.resolve() };
          held.set(c.sessionId, h);
          h.done = (before ? before.done : Promise.resolve()).then(() => (stopping ? releaseUnopened(h) : runSession(h)));
        }
        if (stopping) break;
        if (claimed.length > 0 && claimed.length === room) continue; // more may be waiting
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => finish(), failures > 0 ? Math.min(o.pollMs * 2 ** failures, 30_000) : o.pollMs);
        const finish = () => {
          clearTimeout(t);
          wakeClaims = undefined;
          resolve();
        };
        wakeClaims = finish;
      });
    }
  }

  async function releaseUnopened(h: Held): Promise<void> {
    await work.release(h.sessionId, workerId, null, { resume: false }).catch(() => undefined);
    if (held.get(h.sessionId) === h) held.delete(h.sessionId);
  }

  const renewTimer = setInterval(() => void renewAll(), renewEvery);
  const loop = (async () => {
    await work.heartbeat(registration, o.leaseMs).catch((e) => emit({ type: 'error', workerId, message: `registering the worker failed: ${messageOf(e)}` }));
    emit({ type: 'started', workerId });
    await claimLoop();
  })();

  let resolveClosed!: () => void;
  const closed = new Promise<void>((r) => (resolveClosed = r));

  const stop = (opts: { graceMs?: number } = {}): Promise<void> => {
    if (opts.graceMs !== undefined) graceMs = opts.graceMs;
    return (stopped ??= (async () => {
      stopping = true;
      emit({ type: 'stopping', workerId });
      kickClaims();
      await loop.catch(() => undefined);
      for (const h of held.values()) h.wake();
      await Promise.all([...held.values()].map((h) => h.done.catch(() => undefined)));
      clearInterval(renewTimer);
      wakeSub.unsubscribe();
      await work.removeWorker(workerId).catch(() => undefined);
      emit({ type: 'stopped', workerId });
      events.complete();
      resolveClosed();
    })());
  };
  if (o.signal) {
    if (o.signal.aborted) void stop();
    else o.signal.addEventListener('abort', () => void stop(), { once: true });
  }

  return {
    workerId,
    events$: events.asObservable(),
    subscribe(listener) {
      const sub = events.subscribe({ next: listener });
      return () => sub.unsubscribe();
    },
    get sessions() {
      return [...held.keys()];
    },
    stop,
    closed,
  };
}

const busy = (s: ExecutionSession) => {
  const p = String(s.actor.getSnapshot().value);
  return p === 'preparing' || p === 'executing' || p === 'finalizing';
};
