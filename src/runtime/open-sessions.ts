import { defer, filter, from, merge, mergeMap, Subject, type Observable } from 'rxjs';
import type { Envelope } from '../streams/envelopes.js';
import type { ExecutionSession } from './execution-session.js';

/** The sessions a runtime has open, in the order they opened, until it closes. */
export class OpenSessions implements Iterable<ExecutionSession> {
  private readonly open = new Set<ExecutionSession>();
  private readonly opened$ = new Subject<ExecutionSession>();
  /** Set once the runtime closes: no session opens after. */
  closed = false;

  [Symbol.iterator](): Iterator<ExecutionSession> {
    return this.open[Symbol.iterator]();
  }

  /** A session went live: its envelopes join `envelopes$` of its id. */
  add(session: ExecutionSession): void {
    this.open.add(session);
    this.opened$.next(session);
  }

  delete(session: ExecutionSession): void {
    this.open.delete(session);
  }

  /** The instance of `sessionId` opened last, if one is open. */
  latest(sessionId: string): ExecutionSession | undefined {
    return [...this.open].filter((s) => s.sessionId === sessionId).at(-1);
  }

  /** The envelopes of every instance of `sessionId` open now and opened later (`runtime.liveEnvelopes$`). */
  envelopes$(sessionId: string): Observable<Envelope> {
    const mine = (s: ExecutionSession) => s.sessionId === sessionId;
    return defer(() => merge(from([...this.open].filter(mine)), this.opened$.pipe(filter(mine)))).pipe(mergeMap((s) => s.events$));
  }

  /** The runtime closes: none opens after; returns the sessions open now, for it to close one after another. */
  closing(): ExecutionSession[] {
    this.closed = true;
    this.opened$.complete();
    return [...this.open];
  }
}
