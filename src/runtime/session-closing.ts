import type { Clock } from '../contracts/clock.js';
import { StoreClosedError } from '../contracts/errors.js';
import type { SessionEvent } from '../machines/session.machine.js';
import type { EventStore } from '../persistence/event-store.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { SubscriberHub } from '../streams/subscribers.js';
import type { AttemptCallers } from './attempt-callers.js';
import { recordedResult } from './log-lookups.js';
import type { OpenRunTracker } from './open-run-tracker.js';

/** What closing a session touches of it. */
export interface ClosingSession {
  sessionId: string;
  store: EventStore;
  writer: LogWriter;
  clock: Clock;
  callers: AttemptCallers;
  runs: OpenRunTracker;
  stream: EnvelopeStream;
  hub: SubscriberHub;
  /** Sends the session machine an event. */
  send(event: SessionEvent): void;
}

/**
 * Closing one session: the writer refuses new appends and the session machine is sent `CLOSE`;
 * its `closeSession` actor (`work`) answers every caller and drains the subscribers, and then
 * `close`'s promise resolves. A second `close` shares the first's promise.
 */
export class SessionClosing {
  private closing?: Promise<void>;
  private closeDone: () => void = () => {};

  constructor(private readonly s: ClosingSession) {}

  close(): Promise<void> {
    return (this.closing ??= new Promise<void>((resolve) => {
      this.closeDone = resolve;
      this.s.writer.close(new StoreClosedError(`session ${this.s.sessionId}`));
      // closing stops the run under way (its actors' signals abort); closeSession does the rest
      this.s.send({ type: 'CLOSE' });
    }));
  }

  /** The session machine's `closeSession` actor: every caller answered, subscribers drained. */
  async work(): Promise<void> {
    const { sessionId, store, writer, clock, callers, runs, stream, hub } = this.s;
    try {
      await callers.closeAll(writer.settled(), clock, (w) => recordedResult(store, sessionId, w.runId, w.attemptId, runs.open?.runId));
      stream.complete();
      // a required subscriber gets every envelope (DESIGN §6): what is queued for it is delivered
      // before the hub drops its subscribers
      await hub.whenRequiredDrained();
      hub.close();
      callers.idle();
    } finally {
      this.closeDone();
    }
  }
}
