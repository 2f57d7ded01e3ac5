import type { Observable } from 'rxjs';
import { ValidationError } from '../contracts/errors.js';
import {
  toMessages,
  type ExecutionRequest,
  type ExecutionResult,
  type IdentifiedRequest,
  type CheckedRunRequest,
} from '../contracts/requests.js';
import type { ModelProvider } from '../contracts/model.js';
import { assertContentLimits, assertContentTaken, type ContentLimits } from '../persistence/content-parts.js';
import { assertRunIdsFit } from '../persistence/run-ids.js';
import type { Envelope } from '../streams/envelopes.js';
import { parsePartialJson } from '../streams/partial-json.js';
import type { DeepPartial, TypedResult } from './run-options.js';

/**
 * One attempt started by `session.run`: its ids, its live output and its result.
 * Contract: `textStream` and `events` each deliver the attempt's output once, from its start, to
 * one consumer, and end when the attempt has finished (after `execution_finished`); if the
 * attempt is refused (bad input, a busy session) both throw the error `result` rejects with.
 * Both buffer what has not been read yet (an attempt's envelopes, not the session's history).
 */
export interface RunHandle<T = unknown> {
  readonly runId: string;
  readonly attemptId: string;
  /** The assistant's text as it streams: the deltas of every model call of the attempt. */
  readonly textStream: AsyncIterable<string>;
  /** The attempt's envelopes (DESIGN §6, docs/streaming.md), in order. */
  readonly events: AsyncIterable<Envelope>;
  /**
   * With an output schema (the run's or the runtime's): the answer's object as its JSON streams,
   * parsed tolerantly after each delta of a model call (a new call starts over); each value is a
   * partial object, not yet validated; one not read before the next is replaced by it. Nothing
   * without a schema. Otherwise the same contract as `textStream`.
   */
  readonly partialOutputStream: AsyncIterable<DeepPartial<T>>;
  /** The attempt's ExecutionResult, as `execute` resolves it; `output` typed by the run's schema. */
  readonly result: Promise<TypedResult<T>>;
}

/**
 * A single-consumer queue read as an async iterable: pushed values, then an end or an error.
 * `latestOnly`: a value not read yet is replaced by the next (partial objects: the newest is enough).
 */
class Feed<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  constructor(private readonly latestOnly = false) {}

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
    } else if (this.latestOnly) this.items.splice(0, this.items.length, v);
    else this.items.push(v);
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
export function runHandle(
  events$: Observable<Envelope>,
  req: ExecutionRequest & { runId: string; attemptId: string },
  execute: (r: ExecutionRequest) => Promise<ExecutionResult>,
  typed = false,
): RunHandle {
  const events = new Feed<Envelope>();
  const text = new Feed<string>();
  const partials = new Feed<unknown>(true);
  const partial = typed ? partialOutputs((v) => partials.push(v)) : undefined;
  let streamed = false;
  const sub = events$.subscribe((env) => {
    if (env.runId !== req.runId || env.attemptId !== req.attemptId) return;
    events.push(env);
    const e = env.event;
    if (e.type === 'message_start' && e.role === 'assistant') {
      streamed = false;
      partial?.reset();
    } else if (e.type === 'message_delta' && e.role === 'assistant' && e.text !== '') {
      streamed = true;
      text.push(e.text);
      partial?.add(e.text);
    } else if (
      e.type === 'message_end' &&
      e.role === 'assistant' &&
      !e.discarded &&
      !streamed &&
      typeof e.message.content === 'string' &&
      e.message.content !== ''
    ) {
      // a provider that does not stream: its whole answer at once, for the text and the object
      text.push(e.message.content);
      partial?.add(e.message.content);
    }
    if (e.type === 'execution_finished') finish();
  });
  const finish = (error?: { e: unknown }) => {
    sub.unsubscribe();
    events.end(error);
    text.end(error);
    partials.end(error);
  };
  const result = execute(req);
  result.then(
    () => finish(),
    (e: unknown) => finish({ e }),
  );
  return { runId: req.runId, attemptId: req.attemptId, textStream: text, events, partialOutputStream: partials, result };
}

/** The partial objects of one model call's streamed text: each new one (by its JSON) handed to `push`. */
function partialOutputs(push: (v: unknown) => void): { add(text: string): void; reset(): void } {
  let buffer = '';
  let last = '';
  return {
    add(t) {
      buffer += t;
      const v = parsePartialJson(buffer);
      if (v === undefined) return;
      const json = JSON.stringify(v);
      if (json === last) return;
      last = json;
      push(v);
    },
    reset() {
      buffer = last = '';
    },
  };
}

/**
 * `session.run`'s request with its ids, known before the attempt starts (its envelopes are
 * matched by them): a message is a prompt; a prompt's missing ids are generated; a respond or
 * continue without a runId takes the open run's (`openRunId`; '' when none: execute refuses it).
 */
export function identifiedRun(request: CheckedRunRequest, newId: () => string, openRunId: string | undefined): IdentifiedRequest {
  if (typeof request === 'string' || Array.isArray(request) || !('kind' in request))
    return { kind: 'prompt', runId: newId(), attemptId: newId(), message: request };
  return {
    ...request,
    runId: request.runId ?? (request.kind === 'prompt' ? newId() : (openRunId ?? '')),
    attemptId: request.attemptId ?? newId(),
  } as IdentifiedRequest;
}

/** An execute request with its ids: a respond or continue without them takes `openRunId` and a new attempt id. */
export function identifiedRequest(
  req: ExecutionRequest,
  openRunId: string | undefined,
  newId: () => string,
  sessionId: string,
): IdentifiedRequest {
  const runId = req.runId ?? openRunId;
  if (runId === undefined || runId === '')
    throw new ValidationError('session.execute', [
      { path: ['runId'], message: `no run is open in session ${sessionId}: nothing to ${req.kind}` },
    ]);
  return { ...req, runId, attemptId: req.attemptId ?? newId() };
}

/**
 * What `session.run` checks before it returns (its ValidationErrors thrown there, as the request's
 * shape's are): the run's ids fit the store's keys, and a prompt's images and files are ones the
 * session's model takes, within `contentLimits`. What needs the log (a run open to respond to or
 * continue) is checked when the attempt is prepared: `result` rejects. Without a `model` (a session
 * not open yet, whose agent is not known) the parts are checked against `contentLimits` only.
 */
export function assertRunRequest(
  req: IdentifiedRequest,
  s: { sessionId: string; model: ModelProvider | undefined; contentLimits: ContentLimits },
  where = 'session.run',
): void {
  if (req.runId !== '') assertRunIdsFit(s.sessionId, req.runId, req.attemptId, where, ['runId', 'attemptId']);
  if (req.kind !== 'prompt' || typeof req.message === 'string') return;
  const messages = toMessages(req.message);
  if (s.model) assertContentTaken(messages, s.model, `${where}: message`);
  for (const [i, m] of messages.entries()) assertContentLimits(m.content, s.contentLimits, `${where}: message`, [i, 'content']);
}
