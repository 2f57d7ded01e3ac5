import { Subject, type Observable } from 'rxjs';
import type { Message } from '../contracts/message.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { PendingRequest } from '../contracts/events.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { Usage } from '../contracts/message.js';

/** The live events of DESIGN §6's envelope table. */
export type LiveEvent =
  | { type: 'run_start'; sessionInstanceId: string; runId: string; attemptId: string; runEpoch: number; turn: number }
  | { type: 'step_start'; step: number }
  | { type: 'step_end'; step: number; usage?: Usage }
  /**
   * The step's model call waits for the runtime's rate limits (docs/rate-limits.md): `waiting`
   * (with the limit it waits for, and the calls queued before it there), then `granted` (with how
   * long it waited, by the runtime's clock). Live only: never logged.
   */
  | { type: 'rate_limit_wait'; step: number; state: 'waiting' | 'granted'; limit: string; ahead?: number; waitedMs?: number }
  | { type: 'message_start'; role: Message['role'] }
  | { type: 'message_delta'; role: Message['role']; text: string }
  /**
   * `discarded`: the text streamed since `message_start` belongs to a model attempt that failed
   * (it is retried, or the step fails) and is never committed — a client drops what it showed.
   */
  | { type: 'message_end'; role: Message['role']; message: Message; discarded?: { reason: string } }
  | { type: 'tool_start'; callId: string; name: string; arguments: unknown }
  | { type: 'tool_update'; callId: string; name: string; update: unknown }
  | { type: 'tool_end'; callId: string; name: string; outcome: ToolOutcome; startedAt?: number; endedAt?: number }
  | { type: 'input_committed'; inputId: string; durability: 'durable' }
  | { type: 'approval_requested'; pendingRequest: PendingRequest }
  | { type: 'question_asked'; pendingRequest: PendingRequest }
  | { type: 'execution_finished'; result: ExecutionResult };

export interface Envelope {
  runId: string;
  attemptId: string;
  /** Counts this session's envelopes, live-only ones included. */
  seq: number;
  /** The log seq, for envelopes of committed log events. */
  logSeq?: number;
  event: LiveEvent;
}

/**
 * The one module that turns the machines' emissions into RxJS: every envelope of a session goes
 * through `publish` and out of `events$`.
 */
export class EnvelopeStream {
  private readonly subject = new Subject<Envelope>();
  private seq = 0;
  runId = '';
  attemptId = '';
  readonly events$: Observable<Envelope> = this.subject.asObservable();

  publish(event: LiveEvent, logSeq?: number): Envelope {
    const env: Envelope = { runId: this.runId, attemptId: this.attemptId, seq: ++this.seq, event };
    if (logSeq !== undefined) env.logSeq = logSeq;
    this.subject.next(env);
    return env;
  }

  complete(): void {
    this.subject.complete();
  }
}
