import type { ExecutionResult } from '../contracts/requests.js';
import type { SettleOutput } from '../machines/session.machine.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { SubscriberHub } from '../streams/subscribers.js';
import type { AttemptCallers } from './attempt-callers.js';
import type { OpenRunTracker } from './open-run-tracker.js';

/** What settling an attempt touches of its session. */
export interface SettlingSession {
  hub: SubscriberHub;
  callers: AttemptCallers;
  runs: OpenRunTracker;
  writer: LogWriter;
  stream: EnvelopeStream;
  /** The settled result, the session's last (snapshot() reads it). */
  settled(result: ExecutionResult): void;
}

/**
 * The session machine's `settleAttempt` actor: the attempt's result gets its subscribers'
 * delivery errors — and those of earlier attempts found after their results were made (a slow
 * listener's timeout, a failed `execution_finished`), each naming its attempt —; the open run is
 * read back when the run may still be open (or marked unknown when it cannot be);
 * `execution_finished` goes out; says where the session rests now. The attempt's caller is
 * answered once the machine rests.
 */
export async function settleAttempt(s: SettlingSession, finished: ExecutionResult): Promise<SettleOutput> {
  const result: ExecutionResult = {
    ...finished,
    deliveryErrors: [...finished.deliveryErrors, ...s.hub.takeErrors()],
  };
  s.callers.settled(result); // close() answers with it
  s.settled(result);
  if (['suspended', 'detached', 'fenced'].includes(result.status) || !result.checkpointCommitted) await s.runs.afterAttempt();
  else s.runs.settled(result.runId);
  const end = s.writer.projection.lastRunEnd;
  s.stream.publish(
    { type: 'execution_finished', result },
    end?.runId === result.runId && end.attemptId === result.attemptId ? end.seq : undefined,
  );
  if (result.status === 'fenced') return { rest: 'fenced' };
  return { rest: s.runs.asked ? 'suspended' : s.runs.blocking ? 'detached' : 'idle' };
}
