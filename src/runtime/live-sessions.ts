import { hostname } from 'node:os';
import { SessionHeldError, ValidationError } from '../contracts/errors.js';
import type { OpenInternals } from '../actors/worker-services.js';
import type { EventStore } from '../persistence/event-store.js';
import type { ExecutionSession } from './execution-session.js';
import type { ResumeMode } from './auto-resume.js';
import { agentAtOpen, parentAtOpen } from './open-session.js';
import { childSessionRefusal } from './recorded-agent.js';

/**
 * Marks a serving worker's internal second argument to `runtime.openSession` (its lease guard and
 * id): such an open is never shared and never refused (serve and the simulator's pools pass it).
 */
export const SERVED: unique symbol = Symbol('actorloop.served');
export type ServedInternals = OpenInternals & { [SERVED]: true };
export const isServed = (i: unknown): i is ServedInternals => typeof i === 'object' && i !== null && SERVED in i;

/** What an app's `openSession` asked for: the agent (by name) and resume mode; one left out agrees with any. */
export interface OpenWants {
  agent?: string;
  resume?: ResumeMode;
}

/** A session this runtime's serving workers hold: claims not yet ended, the worker's open session. */
interface Served {
  /** The worker of each claim not yet ended. */
  claims: string[];
  session?: ExecutionSession;
  workerId?: string;
}

interface Shared {
  opening: Promise<ExecutionSession>;
  session?: ExecutionSession;
  /** The `openSession` calls not yet matched by a `close`. */
  openers: number;
  /** What the first opener opened it with: the agent it asked for (else the one the session ran) and its resume mode. */
  opened?: { agent: string; resume: ResumeMode };
}

/**
 * One runtime's live writers (DESIGN §11): `openSession` of a session this runtime has open
 * returns that session (one more opener; the writer closes with its last opener's `close`), and a
 * new writer is attached only after the store's holder check (`store.holders`): a session another
 * live process writes is refused with SessionHeldError, before anything is opened. A serving
 * worker's opens are never shared and never refused: its lease decides (docs/scale-out.md).
 */
export class LiveSessions {
  private readonly shared = new Map<string, Shared>();
  /**
   * The sessions this runtime's serving workers hold, from their claim on (`claims` not yet ended)
   * or opened for one: an app's open of one is refused, never a silent fence of the worker.
   */
  private readonly served = new Map<string, Served>();

  constructor(
    private readonly store: EventStore,
    /** The runtime is closing: `close` closes the writer whatever its openers. */
    private readonly runtimeClosing: () => boolean,
  ) {}

  /**
   * `runtime.openSession`: the live session shared, or a new writer from `attach` once the holder
   * check passed. The live session is shared only with an opener whose options (`asked`) agree with
   * what its first opener opened it with (a ValidationError naming both otherwise); the runtime's
   * own opens (a child session's) ask nothing and are not checked.
   */
  async open(sessionId: string, takeover: boolean, attach: () => Promise<ExecutionSession>, asked?: OpenWants): Promise<ExecutionSession> {
    const served = this.served.get(sessionId);
    if (served && !takeover && (served.claims.length > 0 || (served.session !== undefined && (await this.isCurrent(served.session))))) {
      // the holder record names this process, so the store's check would let the open through and fence the worker
      const workerId = served.workerId;
      throw new SessionHeldError(sessionId, { host: hostname(), pid: process.pid, ...(workerId !== undefined ? { workerId } : {}) });
    }
    const entry = this.shared.get(sessionId);
    if (entry) {
      entry.openers++; // counted before the wait: a close meanwhile cannot end it under this opener
      const live = await entry.opening.catch(() => undefined);
      if (live && this.shared.get(sessionId) === entry && (await this.isCurrent(live))) {
        const parent = asked ? parentAtOpen(live) : undefined;
        // an app's open of a live child session: refused (it is its parent call's), as from the log
        const conflict = parent
          ? childSessionRefusal('openSession', sessionId, parent)
          : entry.opened && asked
            ? disagreement(sessionId, entry.opened, asked)
            : undefined;
        if (!conflict) return live;
        entry.openers--;
        throw conflict;
      }
      entry.openers--;
    }
    const fresh: Shared = {
      openers: 1,
      opening: this.attachHeld(sessionId, { takeover }, attach).then(
        (session) => {
          fresh.session = session;
          if (asked) fresh.opened = { agent: asked.agent ?? agentAtOpen(session) ?? 'default', resume: asked.resume ?? 'auto' };
          return session;
        },
        (e: unknown) => {
          if (this.shared.get(sessionId) === fresh) this.shared.delete(sessionId);
          throw e;
        },
      ),
    };
    this.shared.set(sessionId, fresh);
    return fresh.opening;
  }

  /** A serving worker of this runtime claimed the session (before it opens it): an app's open of it is refused from now on. */
  claimedBy(sessionId: string, workerId: string): void {
    const entry = this.served.get(sessionId) ?? { claims: [] };
    entry.claims.push(workerId);
    entry.workerId = workerId;
    this.served.set(sessionId, entry);
  }

  /** One claim of `workerId`'s on the session ended (its session closed, or the claim given back unopened). */
  claimEnded(sessionId: string, workerId: string): void {
    const entry = this.served.get(sessionId);
    const i = entry?.claims.indexOf(workerId) ?? -1;
    if (!entry || i < 0) return;
    entry.claims.splice(i, 1);
    this.forgetIfUnheld(sessionId, entry);
  }

  /** A served entry with no claim and no open session holds nothing: it goes. */
  private forgetIfUnheld(sessionId: string, entry: Served): void {
    if (entry.claims.length === 0 && entry.session === undefined) this.served.delete(sessionId);
  }

  /**
   * The worker ended (stopped, or failed): the claims it did not end itself end now, so that no
   * session stays refused to the app for the rest of the runtime's life.
   */
  workerEnded(workerId: string): void {
    for (const [sessionId, entry] of this.served) {
      entry.claims = entry.claims.filter((w) => w !== workerId);
      this.forgetIfUnheld(sessionId, entry);
    }
  }

  /** A serving worker's open: a writer of its own, recorded as held by the worker, taking over whoever holds it. */
  async openServed(sessionId: string, workerId: string | undefined, attach: () => Promise<ExecutionSession>): Promise<ExecutionSession> {
    const session = await this.attachHeld(sessionId, { takeover: true, ...(workerId !== undefined ? { workerId } : {}) }, attach);
    const entry = this.served.get(sessionId) ?? { claims: [] };
    entry.session = session;
    if (workerId !== undefined) entry.workerId = workerId;
    this.served.set(sessionId, entry);
    const close = session.close.bind(session);
    session.close = async () => {
      const now = this.served.get(sessionId);
      if (now?.session === session) {
        delete now.session;
        this.forgetIfUnheld(sessionId, now);
      }
      await close();
    };
    return session;
  }

  /** Whether a live session is still the session's writer (not fenced by a later attach, not closing). */
  private async isCurrent(session: ExecutionSession): Promise<boolean> {
    const status = session.snapshot().status;
    if (status === 'fenced' || status === 'closing' || status === 'closed') return false;
    const epoch = this.store.writerEpochNow?.(session.sessionId) ?? (await this.store.getHead(session.sessionId))?.writerEpoch;
    return epoch === session.recovery.writerEpoch;
  }

  private async attachHeld(
    sessionId: string,
    claim: { takeover: boolean; workerId?: string },
    attach: () => Promise<ExecutionSession>,
  ): Promise<ExecutionSession> {
    const holders = this.store.holders;
    const holder = await holders?.claim(sessionId, claim);
    if (holder) throw new SessionHeldError(sessionId, holder);
    let session: ExecutionSession;
    try {
      session = await attach();
    } catch (e) {
      await holders?.release(sessionId).catch(() => undefined);
      throw e;
    }
    const closeWriter = session.close.bind(session);
    let released = false;
    session.close = async () => {
      const entry = this.shared.get(sessionId);
      const mine = entry?.session === session;
      if (mine && entry.openers > 1 && !this.runtimeClosing()) {
        entry.openers--;
        return;
      }
      if (mine) this.shared.delete(sessionId);
      await closeWriter();
      if (!released) {
        released = true;
        await holders?.release(sessionId).catch(() => undefined);
      }
    };
    return session;
  }
}

/** The refusal of an open whose `agent` or `resume` differs from what the live session was opened with (an option left out agrees). */
function disagreement(sessionId: string, opened: { agent: string; resume: ResumeMode }, asked: OpenWants): ValidationError | undefined {
  const differs =
    asked.agent !== undefined && asked.agent !== opened.agent
      ? { path: 'agent', live: `agent ${opened.agent}`, asked: `agent ${asked.agent}` }
      : asked.resume !== undefined && asked.resume !== opened.resume
        ? { path: 'resume', live: `resume '${opened.resume}'`, asked: `resume '${asked.resume}'` }
        : undefined;
  if (!differs) return undefined;
  return new ValidationError('openSession', [
    {
      path: [differs.path],
      message:
        `session ${sessionId} is open in this runtime with ${differs.live}, asked for ${differs.asked}: ` +
        'open it with the same options, or after its last close',
    },
  ]);
}
