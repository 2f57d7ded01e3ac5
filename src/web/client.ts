import { createStore } from '@xstate/store';
import { Observable } from 'rxjs';
import { checkOptions, FRAMES_KEYS, sessionIdIssues, STREAM_KEYS, StreamOptionsError, VIEW_KEYS } from './client-options.js';
import { SseParser } from './sse-parse.js';
import { initialView, reduceView, type ConnectionItem, type SessionView, type StreamItem } from './view.js';
import type { Frame } from './wire.js';

/**
 * The browser-safe client of a session's web stream (`actorloop/client`): no Node import, only
 * `fetch`, streams, rxjs and @xstate/store. It reads the SSE stream with `fetch` (so it runs in
 * browsers, workers, Deno and Node alike) and reconnects on its own, resuming with
 * `Last-Event-ID` = the last log position it received: no committed record is missed or repeated.
 */
export interface SessionStreamOptions {
  /** The stream's URL, e.g. `/sessions/s1/events` (what `webHandler` serves). */
  url: string;
  /** Start after this log position (a view restored from storage); the default is the log's start. */
  lastLogSeq?: number;
  /** Delay before a reconnect, until the server's `retry:` says otherwise; doubled per failure up to `maxReconnectMs`. */
  reconnectMs?: number;
  maxReconnectMs?: number;
  /** Ends the stream (the iterator returns). An AbortSignal: the controller itself is refused. */
  signal?: AbortSignal;
  /**
   * The fetch to use (default: the global one). With it, `url` goes to it as given (it may
   * resolve a relative URL its own way); without it, `url` must resolve to an http(s) URL
   * (against the page's location; in Node, where there is none, it is absolute).
   */
  fetch?: typeof fetch;
  /** Request headers (e.g. `authorization`): a plain object of header names to string values. */
  headers?: Record<string, string>;
}

/** The 4xx answers worth retrying (a timeout, a rate limit); any other 4xx cannot succeed by retrying. */
const RETRIED = new Set([408, 429]);

/** A Retry-After header (seconds, or an HTTP date) as a delay, capped at 5 minutes. */
function retryAfterMs(header: string | null): number | undefined {
  if (header === null) return undefined;
  const ms = /^\d+$/.test(header.trim()) ? Number(header) * 1000 : Date.parse(header) - Date.now();
  return Number.isFinite(ms) ? Math.min(300_000, Math.max(0, ms)) : undefined;
}

/**
 * A refusal the stream does not retry, since retrying cannot change it: any 4xx but 408 and 429
 * (400: a bad cursor or session id, 401/403: not authorized, 404: no such route). The stream
 * ends by throwing it (the iterator rejects, the Observable errors).
 */
export class StreamRefusedError extends Error {
  override readonly name = 'StreamRefusedError';
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`the event stream was refused: HTTP ${status} ${body.slice(0, 200)}`);
  }
}

/**
 * The session's frames and connection changes as an async iterable, reconnecting until `signal`
 * aborts, or until the server refuses the stream for good (`StreamRefusedError`, thrown). A
 * `connection` item marks each (re)connection; after `reconnecting`, deltas of a message cut by
 * the disconnect never resume half-way: the committed message follows.
 * @example
 * for await (const item of sessionStream({ url: '/sessions/s1/events' })) console.log(item.kind)
 */
export async function* sessionStream(options: SessionStreamOptions): AsyncGenerator<StreamItem> {
  checkOptions(options, 'sessionStream', STREAM_KEYS);
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const signal = options.signal;
  let last = options.lastLogSeq;
  const base = options.reconnectMs ?? 1000;
  const max = options.maxReconnectMs ?? 30_000;
  let failures = 0;
  let attempt = 0;
  let retryMs: number | undefined;
  const connection = (state: ConnectionItem['state'], error?: string): ConnectionItem => ({
    kind: 'connection',
    state,
    attempt,
    lastLogSeq: last ?? 0,
    ...(error ? { error } : {}),
  });
  while (!signal?.aborted) {
    let error: string | undefined;
    let waitMs: number | undefined;
    let progressed = false;
    const failuresBefore = failures;
    try {
      const headers: Record<string, string> = { accept: 'text/event-stream', ...options.headers };
      if (last !== undefined) headers['last-event-id'] = String(last);
      const res = await doFetch(options.url, { headers, ...(signal ? { signal } : {}) });
      if (res.status >= 400 && res.status < 500 && !RETRIED.has(res.status)) throw new StreamRefusedError(res.status, await res.text());
      if (!res.ok || !res.body) {
        waitMs = retryAfterMs(res.headers.get('retry-after'));
        await res.body?.cancel().catch(() => undefined);
        throw new Error(`HTTP ${res.status}`);
      }
      yield connection('open');
      const parser = new SseParser();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          for (const msg of parser.push(value)) {
            const frame = JSON.parse(msg.data) as Frame;
            if (frame.kind === 'committed') last = frame.logSeq;
            if (frame.kind === 'committed' || frame.kind === 'live') progressed = true;
            if (frame.kind === 'stream-error') error = `${frame.name}: ${frame.message}`;
            else failures = 0;
            yield frame;
          }
          retryMs = parser.retryMs ?? retryMs;
        }
      } finally {
        reader.releaseLock();
      }
      // a stream that ended in an error without a record is one more failed attempt in a row (its
      // `ready` was no progress): the next one waits longer
      if (error !== undefined) failures = (progressed ? 0 : failuresBefore) + 1;
    } catch (e) {
      if (signal?.aborted) break;
      if (e instanceof StreamRefusedError) throw e;
      error = (e as Error).message;
      failures++;
    }
    if (signal?.aborted) break;
    attempt++;
    yield connection('reconnecting', error);
    const delay = waitMs ?? Math.min(max, (retryMs ?? base) * 2 ** Math.max(0, failures - 1));
    await sleep(delay, signal);
  }
  yield connection('closed');
}

/**
 * The same stream as an RxJS Observable; unsubscribing ends the connection.
 * @example
 * const sub = sessionFrames$({ url: '/sessions/s1/events' }).subscribe((item) => render(item))
 */
export function sessionFrames$(options: Omit<SessionStreamOptions, 'signal'>): Observable<StreamItem> {
  checkOptions(options, 'sessionFrames$', FRAMES_KEYS);
  return new Observable<StreamItem>((subscriber) => {
    const abort = new AbortController();
    (async () => {
      for await (const item of sessionStream({ ...options, signal: abort.signal })) subscriber.next(item);
      subscriber.complete();
    })().catch((e) => subscriber.error(e));
    return () => abort.abort();
  });
}

/**
 * An `@xstate/store` store holding a `SessionView`, folded by `reduceView`.
 * @example
 * const store = createSessionViewStore('s1')
 * sessionFrames$({ url: '/sessions/s1/events' }).subscribe((item) => store.trigger.item({ item }))
 */
export function createSessionViewStore(sessionId: string, initial: SessionView = initialView(sessionId)) {
  const issues = sessionIdIssues(sessionId);
  if (typeof initial !== 'object' || initial === null) issues.push({ path: ['initial'], message: 'expected a SessionView' });
  if (issues.length > 0) throw new StreamOptionsError('createSessionViewStore', issues);
  return createStore({
    context: initial,
    on: { item: (view: SessionView, e: { item: StreamItem }) => reduceView(view, e.item) },
  });
}

/**
 * Connects a session's stream to a view store: the store stays current until `stop()`.
 * @example
 * const { store, stop } = connectSessionView({ sessionId: 's1', url: '/sessions/s1/events' })
 * store.subscribe((s) => render(s.context))
 */
export function connectSessionView(options: Omit<SessionStreamOptions, 'signal'> & { sessionId: string }) {
  checkOptions(options, 'connectSessionView', VIEW_KEYS);
  const { sessionId, ...streamOptions } = options;
  const store = createSessionViewStore(sessionId);
  const abort = new AbortController();
  const done = (async () => {
    for await (const item of sessionStream({ ...streamOptions, signal: abort.signal })) store.trigger.item({ item });
  })().catch((e: Error) => store.trigger.item({ item: { kind: 'stream-error', name: e.name, message: e.message } }));
  return { store, done, stop: () => abort.abort() };
}

/** Resolves after `ms`, or at once when `signal` aborts (the listener is added before the timer: nothing is left behind if it throws). */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    let t: ReturnType<typeof setTimeout> | undefined;
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
    t = setTimeout(done, ms);
  });
}

export { StreamOptionsError } from './client-options.js';
export type { OptionIssue } from './client-options.js';
export { initialView, reduceView } from './view.js';
export type { ChildView, ConnectionItem, SessionView, StreamItem, ViewItem } from './view.js';
export type { CommittedFrame, DroppedFrame, Frame, LiveFrame, ReadyFrame, StreamErrorFrame, WireRecord } from './wire.js';
export { SseParser } from './sse-parse.js';
export type { SseMessage } from './sse-parse.js';
