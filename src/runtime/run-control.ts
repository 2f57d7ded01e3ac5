import type { StopReceipt, StopRequest } from '../contracts/requests.js';
import type { SessionContext, SessionEvent } from '../machines/session.machine.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { OpenRunTracker } from './open-run-tracker.js';
import type { StopRequests } from './stop-requests.js';
import type { WaitStops } from '../actors/wait-stops.js';

/** What run control reads of the session actor. */
export interface ControlledSession {
  /** The session machine's state value. */
  phase(): string;
  current(): SessionContext['current'];
  send(event: SessionEvent): void;
  /**
   * The running attempt's end is decided: its final answer committed (it is delivered, whatever
   * comes next) or its end being committed (completed, suspended, detached, …) — no cancel
   * changes it now.
   */
  settled(): boolean;
}

const sameAttempt = (a: SessionContext['current'], b: SessionContext['current']) =>
  a !== undefined && b !== undefined && a.runId === b.runId && a.attemptId === b.attemptId;

/**
 * Cancel, detach and stop-after-round for one session (DESIGN §4 items 9–10): each goes to the
 * session machine as an event, and only to the attempt it was asked for — never to one that
 * started while the request was being written.
 */
export class RunControl {
  constructor(
    private readonly session: ControlledSession,
    private readonly writer: LogWriter,
    private readonly stops: StopRequests,
    private readonly runs: OpenRunTracker,
    /** Ends the running attempt's waits for a rate limit when it is asked to stop (absent without rate limits). */
    private readonly waitStops?: WaitStops,
  ) {}

  /** `recordId`: the event id its `cancellation/requested` takes (an inbox cancel's, which a re-apply looks up). */
  async cancel(reason: string, recordId?: string): Promise<boolean> {
    const target = this.session.current();
    if (!target) {
      // an execute still preparing its attempt: that attempt starts cancelled (as detach);
      // not one whose attempt has ended (its result still being settled)
      if (this.session.phase() !== 'preparing') return false;
      this.session.send({ type: 'CANCEL', reason, ...(recordId !== undefined ? { recordId } : {}) });
      return true;
    }
    if (this.session.phase() !== 'executing') return false; // ended: its result is being settled
    // its end decided (a final committed, or the end's commit under way): the run ends as decided,
    // and no `cancellation/requested` is written that nothing would honour
    if (this.session.settled()) return false;
    const at = { turn: 0, step: 0, attempt: target.runEpoch };
    // The record is queued and the attempt told in one synchronous step: the record lands ahead of
    // whatever the run commits on the cancel (appends keep their order), and the cancel reaches
    // the attempt running now — not after a commit under way (the step's results) has landed
    // and let the run end otherwise (suspended on a child's request) meanwhile.
    // (named by run and attempt: it may land ahead of that attempt's run/start, which is then still being staged)
    const named = { reason, runId: target.runId, attemptId: target.attemptId };
    const recorded = this.writer.appendNow([this.writer.draft('cancellation/requested', at, named, recordId)]).catch(() => undefined);
    this.session.send({ type: 'CANCEL', reason });
    await recorded;
    return true;
  }

  detach(): boolean {
    // preparing: the attempt starts detached; executing: the run detaches at its next safe point;
    // an attempt that has ended (being settled) has nothing to detach
    const phase = this.session.phase();
    if (phase !== 'preparing' && phase !== 'executing') return false;
    this.session.send({ type: 'DETACH' });
    return true;
  }

  stopAfterRound(req: StopRequest): Promise<StopReceipt> {
    return this.stops.request(req, {
      current: () => this.session.current(),
      accepted: (cur) => {
        if (sameAttempt(this.session.current(), cur) && this.session.phase() === 'executing') {
          this.session.send({ type: 'STOP_AFTER_ROUND' });
          // a model call still waiting for its rate limit is not made (nothing sent): the run stops
          this.waitStops?.stop();
        }
        // the attempt ended while the request was written: if its run is still open (suspended,
        // detached), the run's next attempt honours the stop, as one in a new process would
        else this.runs.stopAccepted(cur.runId);
      },
    });
  }
}
