import { isObservable, type Observable } from 'rxjs';
import { z } from 'zod';
import { ActorloopError, cutAt, isValidationError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import type { EventStore } from '../persistence/event-store.js';
import { assertSessionId } from '../persistence/store-input.js';
import type { Envelope } from '../streams/envelopes.js';
import { SessionFeed } from './session-feed.js';
import { cursorOf, sseComment, sseFrame, sseRetry } from './sse.js';
import type { Frame } from './wire.js';

export const SessionEventsOptions = z.strictObject({
  /** Frames queued for a client that does not read (as `subscribe`'s capacity). */
  capacity: z.number().int().min(2).max(100_000).default(256),
  /** A comment line this often keeps proxies from closing an idle stream. */
  heartbeatMs: z.number().int().min(10).max(2_147_483_647).default(15_000),
  /** How often the head is checked for appends by another process (LMDB has no notification). */
  pollMs: z.number().int().min(5).max(60_000).default(500),
  /** A client whose queue stays full this long is dropped. */
  stallTimeoutMs: z.number().int().min(10).max(2_147_483_647).default(30_000),
  /** The reconnection delay the stream asks the browser for (`retry:`). */
  retryMs: z.number().int().min(0).max(600_000).default(1_000),
  /**
   * The session's live envelopes where it runs in this process (`runtime.liveEnvelopes$`):
   * its model text deltas and tool progress go out as `live` frames. Without it: committed only.
   */
  live: z.custom<Observable<Envelope>>((v) => isObservable(v), 'an RxJS Observable of envelopes').optional(),
  /**
   * Whether the child sessions of the session's agentTool calls are followed (docs/agents.md):
   * each child's frames come wrapped in `child` frames naming the call.
   */
  children: z.boolean().default(true),
  /**
   * A child session's live envelopes where it runs in this process (`runtime.liveEnvelopes$`):
   * its text deltas and tool progress go out as `live` frames inside `child` frames.
   */
  childEnvelopes: z
    .custom<(sessionId: string) => Observable<Envelope>>((v) => typeof v === 'function', 'a function of a session id')
    .optional(),
});
export type SessionEventsOptions = z.input<typeof SessionEventsOptions>;

/**
 * How a connection's frames become bytes: the session's own SSE events (`sseFrame`), or another
 * protocol over the same log follower (the AI SDK UI message stream, ui-message-stream.ts).
 * `end`: the stream ends after these bytes.
 */
export interface FrameEncoder {
  encode(frame: Frame, id?: number): { bytes: Uint8Array[]; end?: boolean };
}
const SESSION_FRAMES: FrameEncoder = { encode: (frame, id) => ({ bytes: [sseFrame(frame, id)] }) };

/** A JSON error response: `{ error: name, message, issues? }`. */
export function errorResponse(status: number, error: unknown): Response {
  const e = error as { name?: string; message?: string; issues?: unknown };
  const body = {
    error: e.name ?? 'Error',
    message: e.message ?? String(error),
    // (the first 20 issues, each message cut at 300 characters: a small body of many bad parts
    // gets an answer of bounded size, its `message` saying how many more there were)
    ...(isValidationError(error)
      ? {
          issues: error.issues.slice(0, 20).map((i) => ({
            path: i.path.map((k) => (typeof k === 'string' ? cutAt(k, 200) : k)),
            message: cutAt(i.message, 300),
          })),
        }
      : {}),
  };
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
  });
}

/**
 * The session's event stream as server-sent events, on web-standard Request/Response: the log is
 * replayed from the request's cursor (`Last-Event-ID: N` resumes at N + 1, `?fromSeq=N` starts at
 * N) and then followed, also across processes, one `committed` event per log record with `id:` =
 * its seq, so a reconnect resumes exactly after the last record received. Live model text deltas
 * and tool progress (`live`, no id) come only with `options.live`, and only for a message whose
 * start this connection saw. A client that stops reading gets committed records as it reads them
 * (the log waits, filling at most half the queue); one that overflows `capacity` with live
 * frames, or reads nothing for `stallTimeoutMs`, gets a `dropped` event and the stream ends. A bad
 * cursor or session id (one the store refuses, e.g. with a NUL) is a 400, before any stream; bad
 * `options` (the app's) throw a ValidationError.
 * @example
 * // a Next.js route handler: app/sessions/[id]/events/route.ts
 * export const GET = (req: Request, { params }) => sessionEvents(store, params.id, req)
 */
export function sessionEvents(store: EventStore, sessionId: string, request: Request, options: SessionEventsOptions = {}): Response {
  // the app's own options: a mistake there is the app's ValidationError, thrown, not a client's 400
  const o = parseInput(SessionEventsOptions, options, 'sessionEvents: options');
  let fromSeq: number;
  try {
    assertSessionId(sessionId, 'sessionEvents'); // the store's rule, checked before a 200 is sent
    fromSeq = cursorOf(request);
  } catch (e) {
    return errorResponse(400, e);
  }
  const stream = new EventStream(store, sessionId, fromSeq, o, request.signal, SESSION_FRAMES);
  return new Response(stream.body, {
    status: 200,
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    },
  });
}

export type Resolved = z.output<typeof SessionEventsOptions>;

/**
 * One connection: its session's feed (session-feed.ts: the log follower, the live feed, the
 * children of its agent calls), the heartbeat and the bounded queue.
 */
export class EventStream {
  readonly body: ReadableStream<Uint8Array>;
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private readonly abort = new AbortController();
  private readonly waiting = new Set<() => void>(); // feeds waiting for room: woken on every pull
  private sent = 0; // the last log position sent
  private heartbeat: ReturnType<typeof setInterval> | undefined;
  private ended = false;

  constructor(
    private readonly store: EventStore,
    private readonly sessionId: string,
    private readonly fromSeq: number,
    private readonly o: Resolved,
    requestSignal: AbortSignal,
    private readonly encoder: FrameEncoder,
  ) {
    this.sent = fromSeq - 1;
    this.body = new ReadableStream<Uint8Array>(
      {
        start: (c) => {
          this.controller = c;
          if (requestSignal.aborted) return this.end(true);
          requestSignal.addEventListener('abort', () => this.end(true), { once: true });
          void this.run();
        },
        pull: () => this.wake(),
        cancel: () => this.end(),
      },
      { highWaterMark: o.capacity, size: () => 1 },
    );
  }

  private async run(): Promise<void> {
    this.enqueue(sseRetry(this.o.retryMs));
    this.send({ kind: 'ready', sessionId: this.sessionId, fromSeq: this.fromSeq, live: this.o.live !== undefined });
    this.heartbeat = setInterval(() => {
      if ((this.controller.desiredSize ?? 0) > 0) this.enqueue(sseComment('heartbeat'));
    }, this.o.heartbeatMs);
    const o = this.o;
    const childEnvelopes = o.childEnvelopes;
    const feed = new SessionFeed(
      this.store,
      this.sessionId,
      this.fromSeq,
      {
        capacity: o.capacity,
        pollMs: o.pollMs,
        ...(o.live ? { live: o.live } : {}),
        ...(o.children ? { children: (id: string) => childEnvelopes?.(id) } : {}),
      },
      {
        send: (frame, id) => this.send(frame, id),
        waitForRoom: () => this.waitForRoom(),
        hasRoom: () => (this.controller.desiredSize ?? 0) > 0,
        drop: (reason) => this.drop(reason),
      },
      this.abort.signal,
    );
    try {
      await feed.run();
    } catch (e) {
      if (this.ended) return;
      const err = e as Error;
      this.send({ kind: 'stream-error', name: e instanceof ActorloopError ? err.name : 'Error', message: err.message });
      this.end(true);
    }
  }

  private wake(): void {
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const w of waiting) w();
  }

  /**
   * Resolves true once the queue is less than half full (the other half is headroom for live
   * frames), false when the stream ended or the client read nothing for `stallTimeoutMs`.
   */
  private async waitForRoom(): Promise<boolean> {
    while (!this.ended && (this.controller.desiredSize ?? 0) <= this.o.capacity / 2) {
      const read = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => {
          this.waiting.delete(woken);
          resolve(false);
        }, this.o.stallTimeoutMs);
        const woken = () => {
          clearTimeout(timer);
          resolve(true);
        };
        this.waiting.add(woken);
      });
      if (!read && !this.ended) this.drop('stalled');
    }
    return !this.ended;
  }

  private drop(reason: 'capacity' | 'stalled'): void {
    if (this.ended) return;
    // the one frame past capacity: the client learns why the stream ended and where to resume
    this.send({ kind: 'dropped', reason, capacity: this.o.capacity, lastLogSeq: this.sent });
    this.end(true);
  }

  private send(frame: Frame, id?: number): void {
    if (this.ended) return;
    if (frame.kind === 'committed' && id !== undefined) this.sent = id;
    const { bytes, end } = this.encoder.encode(frame, id);
    for (const b of bytes) this.enqueue(b);
    if (end) this.end(true);
  }

  private enqueue(chunk: Uint8Array): void {
    if (this.ended) return;
    this.controller.enqueue(chunk);
  }

  private end(close = false): void {
    if (this.ended) return;
    this.ended = true;
    this.abort.abort();
    this.wake();
    clearInterval(this.heartbeat);
    if (close) {
      try {
        this.controller.close();
      } catch {
        // already cancelled by the client
      }
    }
  }
}
