import type { Observable } from 'rxjs';
import type { ExecutionRequest, ExecutionResult } from '../contracts/requests.js';
import type { Envelope } from '../streams/envelopes.js';

/**
 * One attempt started by `session.run`: its ids, its live output and its result.
 * Contract: `textStream` and `events` each deliver the attempt's output once, from its start, to
 * one consumer, and end when the attempt has finished (after `execution_finished`); if the
 * attempt is refused (bad input, a busy session) both throw the error `result` rejects with.
 * Both buffer what has not been read yet (an attempt's envelopes, not the session's history).
 */
export interface RunHandle {
  readonly runId: string;
  readonly attemptId: string;
  /** The assistant's text as it streams: the deltas of every model call of the attempt. */
  readonly textStream: AsyncIterable<string>;
  /** The attempt's envelopes (DESIGN §6, docs/streaming.md), in order. */
  readonly events: AsyncIterable<Envelope>;
  /** The attempt's ExecutionResult, as `execute` resolves it. */
  readonly result: Promise<ExecutionResult>;
}

/** A single-consumer queue read as an async iterable: pushed values, then an end or an error. */
class Feed<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiting: ((r: IteratorResult<T>) => void) | undefined;
  private failWaiting: ((e: unknown) => void) | undefined;
  private ended = false;
  private error: { e: unknown } | undefined;

  push(v: T): void {
    if (this.ended) return;
    const w = this.waiting;
    if (w) {
      this.waiting = this.failWaiting = undefined;
      w({ value: v, done: false });
    } else this.items.push(v);
  }

  end(error?: { e: unknown }): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    const w = this.waiting;
    const f = this.failWaiting;
    this.waiting = this.failWaiting = undefined;
    if (error && f) f(error.e);
    else w?.({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length > 0) return Promise.resolve({ value: this.items.shift()!, done: false });
        if (this.ended) {
          if (this.error) {
            const { e } = this.error;
            this.error = undefined; // thrown once; the iterator is done after it
            return Promise.reject(e);
          }
          return Promise.resolve({ value: undefined, done: true });
        }
        return new Promise<IteratorResult<T>>((resolve, reject) => {
          this.waiting = resolve;
          this.failWaiting = reject;
        });
      },
      return: () => {
        // the consumer stopped reading: what is still pushed is dropped
        this.items.length = 0;
        this.end();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}

/**
 * Starts `execute(req)` with a subscription to `events$` taken first, so no envelope of the
 * attempt is missed; the envelopes of the attempt (matched by run and attempt id) feed `events`,
 * its assistant text `textStream` — the deltas, or a message's whole text when its model call
 * did not stream.
 */
export function runHandle(events$: Observable<Envelope>, req: ExecutionRequest & { runId: string; attemptId: string }, execute: (r: ExecutionRequest) => Promise<ExecutionResult>): RunHandle {
  const events = new Feed<Envelope>();
  const text = new Feed<string>();
  let streamed = false;
  const sub = events$.subscribe((env) => {
    if (env.runId !== req.runId || env.attemptId !== req.attemptId) return;
    events.push(env);
    const e = env.event;
    if (e.type === 'message_start' && e.role === 'assistant') streamed = false;
    else if (e.type === 'message_delta' && e.role === 'assistant' && e.text !== '') {
      streamed = true;
      text.push(e.text);
    } else if (e.type === 'message_end' && e.role === 'assistant' && !e.discarded && !streamed && typeof e.message.content === 'string' && e.message.content !== '') {
      text.push(e.message.content);
    }
    if (e.type === 'execution_finished') finish();
  });
  const finish = (error?: { e: unknown }) => {
    sub.unsubscribe();
    events.end(error);
    text.end(error);
  };
  const result = execute(req);
  result.then(
    () => finish(),
    (e: unknown) => finish({ e }),
  );
  return { runId: req.runId, attemptId: req.attemptId, textStream: text, events, result };
}
