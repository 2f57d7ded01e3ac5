import { isObservable, type Observable, type Subscription } from 'rxjs';
import { z } from 'zod';
import { ActorloopError, isValidationError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import { parseInput } from '../contracts/validate.js';
import type { EventStore } from '../persistence/event-store.js';
import { assertSessionId } from '../persistence/store-input.js';
import { committedEnvelopes } from '../streams/committed-envelopes.js';
import type { Envelope, LiveEvent } from '../streams/envelopes.js';
import { followLog } from './log-follow.js';
import { cursorOf, sseComment, sseFrame, sseRetry } from './sse.js';
import type { CommittedFrame, Frame, LiveFrame } from './wire.js';

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
    ...(isValidationError(error) ? { issues: error.issues } : {}),
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
 * cursor or session id (one the store refuses, e.g. with a NUL) is a 400, before any stream.
 * @example
 * // a Next.js route handler: app/sessions/[id]/events/route.ts
 * export const GET = (req: Request, { params }) => sessionEvents(store, params.id, req)
 */
export function sessionEvents(store: EventStore, sessionId: string, request: Request, options: SessionEventsOptions = {}): Response {
  let fromSeq: number;
  let o: z.output<typeof SessionEventsOptions>;
  try {
    assertSessionId(sessionId, 'sessionEvents'); // the store's rule, checked before a 200 is sent
    o = parseInput(SessionEventsOptions, options, 'sessionEvents: options');
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

/** One connection: the log follower, the live feed, the heartbeat and the bounded queue. */
export class EventStream {
  readonly body: ReadableStream<Uint8Array>;
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private readonly abort = new AbortController();
  private room: (() => void) | undefined;
  private sent = 0; // the last log position sent
  private runId: string | undefined;
  private instanceId = '';
  private live: Subscription | undefined;
  private liveHead = 0; // the newest log position the session's envelopes announced
  private held: { afterLogSeq: number; frame: LiveFrame }[] = [];
  private streaming = false; // a message started on this connection is streaming
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
        pull: () => {
          this.room?.();
          this.room = undefined;
        },
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
    try {
      await this.knownRun();
      if (this.o.live) this.live = this.o.live.subscribe({ next: (env) => this.onLive(env) });
      for await (const r of followLog(this.store, this.sessionId, this.fromSeq, { pollMs: this.o.pollMs, signal: this.abort.signal })) {
        if (!(await this.waitForRoom())) return;
        this.sendCommitted(r);
      }
    } catch (e) {
      if (this.ended) return;
      const err = e as Error;
      this.send({ kind: 'stream-error', name: e instanceof ActorloopError ? err.name : 'Error', message: err.message });
      this.end(true);
    }
  }

  /**
   * Where the log stands at connect: live frames wait until the replay has reached it (no live
   * text over old history), and a resume inside a run knows its id from the head's open run.
   */
  private async knownRun(): Promise<void> {
    const head = await this.store.getHead(this.sessionId);
    this.liveHead = Math.max(this.liveHead, head?.lastSeq ?? 0);
    const open = head?.openRun;
    if (open && open.startSeq < this.fromSeq) this.runId = open.runId;
  }

  private sendCommitted(r: EventRecord): void {
    if (r.type === 'session/attached') this.instanceId = String(r.payload.sessionInstanceId);
    if (r.type === 'run/start') this.runId = String(r.payload.runId);
    const events: LiveEvent[] = committedEnvelopes([r], this.instanceId).map((e) => e.event);
    if (r.type === 'tool/call')
      events.push({ type: 'tool_start', callId: String(r.payload.callId), name: String(r.payload.name), arguments: r.payload.arguments });
    const frame: CommittedFrame = {
      kind: 'committed',
      logSeq: r.seq,
      ...(this.runId !== undefined ? { runId: this.runId } : {}),
      record: {
        seq: r.seq,
        eventId: r.eventId,
        type: r.type,
        turn: r.turn,
        step: r.step,
        attempt: r.attempt,
        occurredAt: r.occurredAt,
        payload: r.payload,
      },
      events,
    };
    this.sent = r.seq;
    this.send(frame, r.seq);
    if (r.type === 'assistant/message') this.streaming = false; // its deltas end with the committed message
    this.flushHeld();
  }

  /** Live-only envelopes of the session running here; committed ones come from the log. */
  private onLive(env: Envelope): void {
    if (this.ended) return;
    if (env.logSeq !== undefined) {
      this.liveHead = Math.max(this.liveHead, env.logSeq);
      return;
    }
    const e = env.event;
    if (e.type === 'message_start') this.streaming = true;
    else if (e.type === 'message_delta' && !this.streaming)
      return; // begun before this connection: the committed message will come
    else if (e.type === 'message_end') {
      if (!this.streaming) return;
      this.streaming = false;
    }
    this.held.push({
      afterLogSeq: this.liveHead,
      frame: { kind: 'live', runId: env.runId, attemptId: env.attemptId, afterLogSeq: this.liveHead, event: e },
    });
    if (this.held.length > this.o.capacity) {
      // a replay still far behind: this connection skips the live text; the log has the message
      this.held = this.held.filter((h) => h.frame.event.type !== 'message_delta' && h.frame.event.type !== 'message_start');
      this.streaming = false;
      if (this.held.length > this.o.capacity) this.held.splice(0, this.held.length - this.o.capacity);
    }
    this.flushHeld();
  }

  private flushHeld(): void {
    while (this.held.length > 0 && this.held[0]!.afterLogSeq <= this.sent) {
      const { frame } = this.held.shift()!;
      if ((this.controller.desiredSize ?? 0) <= 0) return this.drop('capacity');
      this.send(frame);
    }
  }

  /**
   * Resolves true once the queue is less than half full (the other half is headroom for live
   * frames), false when the stream ended or the client read nothing for `stallTimeoutMs`.
   */
  private async waitForRoom(): Promise<boolean> {
    while (!this.ended && (this.controller.desiredSize ?? 0) <= this.o.capacity / 2) {
      const read = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), this.o.stallTimeoutMs);
        this.room = () => {
          clearTimeout(timer);
          resolve(true);
        };
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
    this.room?.();
    clearInterval(this.heartbeat);
    this.live?.unsubscribe();
    if (close) {
      try {
        this.controller.close();
      } catch {
        // already cancelled by the client
      }
    }
  }
}
