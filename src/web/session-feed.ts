import type { Observable, Subscription } from 'rxjs';
import { ActorloopError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';
import { childSessionId } from '../runtime/agent-calls.js';
import { committedEnvelopes } from '../streams/committed-envelopes.js';
import type { Envelope, LiveEvent } from '../streams/envelopes.js';
import { followLog } from './log-follow.js';
import type { ChildFrame, CommittedFrame, Frame, LiveFrame } from './wire.js';

/** What a feed's frames go to: the connection (session-events.ts), or the parent feed of a child. */
export interface FeedOutput {
  /** Sends a frame; `id` (a root feed's committed record) is its SSE id. */
  send(frame: Frame, id?: number): void;
  /** Resolves true once there is room for committed frames, false once the connection ended. */
  waitForRoom(): Promise<boolean>;
  /** Whether a live frame fits now (else the connection is dropped: `drop('capacity')`). */
  hasRoom(): boolean;
  drop(reason: 'capacity'): void;
}

/** What a feed follows besides its own log. */
export interface FeedOptions {
  capacity: number;
  pollMs: number;
  /** The session's live envelopes where it runs in this process. */
  live?: Observable<Envelope>;
  /** The live envelopes of a child session (an agentTool's) by id; absent: children are not followed. */
  children?: (sessionId: string) => Observable<Envelope> | undefined;
}

/**
 * One session's frames on a connection: its log from `fromSeq`, followed, as `committed` frames;
 * its live envelopes as `live` frames, each sent after the record it follows; and, for every
 * agentTool call (a `resumable` `tool/call`), the child session's frames — its whole log and its
 * live envelopes, its own children's nested in turn — wrapped in `child` frames naming the call.
 * A child's feed ends once its log is read up to where it stood when the parent's `tool/result`
 * for the call was read (the child settled before that result was committed).
 */
export class SessionFeed {
  private sent = 0; // the last log position sent
  private runId: string | undefined;
  private instanceId = '';
  private liveSub: Subscription | undefined;
  private liveHead = 0; // the newest log position the session's envelopes announced
  private held: { afterLogSeq: number; frame: LiveFrame }[] = [];
  private streaming = false; // a message started on this connection is streaming
  private readonly abort = new AbortController();
  private readonly children = new Map<string, SessionFeed>(); // by child session id
  private readonly openCalls = new Map<string, SessionFeed>(); // the child of each call without a result yet, by call id
  private endAt: number | undefined; // a child feed: the last seq it sends

  constructor(
    private readonly store: EventStore,
    readonly sessionId: string,
    private readonly fromSeq: number,
    private readonly o: FeedOptions,
    private readonly out: FeedOutput,
    signal: AbortSignal,
  ) {
    this.sent = fromSeq - 1;
    // the connection ended: the live feed is let go of at once
    if (signal.aborted) this.abort.abort();
    else signal.addEventListener('abort', () => this.stop(), { once: true });
  }

  /** Follows the log until the connection ends (a child's: until its call's result was read). Rejects on a store error. */
  async run(): Promise<void> {
    try {
      await this.knownRun();
      if (this.o.live) this.liveSub = this.o.live.subscribe({ next: (env) => this.onLive(env) });
      for await (const r of followLog(this.store, this.sessionId, this.fromSeq, { pollMs: this.o.pollMs, signal: this.abort.signal })) {
        if (!(await this.out.waitForRoom())) return;
        this.sendCommitted(r);
        if (this.endAt !== undefined && r.seq >= this.endAt) return;
      }
    } finally {
      this.stop();
    }
  }

  /** A child feed: stops once its log is sent up to where it stands now. */
  async finish(): Promise<void> {
    const head = await this.store.getHead(this.sessionId);
    this.endAt = head?.lastSeq ?? 0;
    if (this.sent >= this.endAt) this.stop();
  }

  stop(): void {
    this.abort.abort();
    this.liveSub?.unsubscribe();
    for (const c of this.children.values()) c.stop();
  }

  /**
   * Where the log stands at connect: live frames wait until the replay has reached it (no live
   * text over old history); a resume inside a run knows its id from the head's open run, and
   * follows the children of the run's agent calls that had no result before the cursor.
   */
  private async knownRun(): Promise<void> {
    const head = await this.store.getHead(this.sessionId);
    this.liveHead = Math.max(this.liveHead, head?.lastSeq ?? 0);
    const open = head?.openRun;
    if (!open || open.startSeq >= this.fromSeq) return;
    this.runId = open.runId;
    if (!this.o.children) return;
    const unanswered = new Map<string, EventRecord>(); // agent calls before the cursor, by call id, until their result
    for await (const r of this.store.readEvents(this.sessionId, { fromSeq: open.startSeq, toSeq: this.fromSeq - 1 })) {
      if (r.type === 'tool/call' && r.payload.resumable === true) unanswered.set(String(r.payload.callId), r);
      if (r.type === 'tool/result') unanswered.delete(String(r.payload.callId));
    }
    for (const r of unanswered.values()) this.followChildren(r);
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
    this.out.send(frame, r.seq);
    if (r.type === 'assistant/message') this.streaming = false; // its deltas end with the committed message
    this.flushHeld();
    if (this.o.children) this.followChildren(r);
  }

  /**
   * An agent call's intent starts following its child (a compaction's copy of it starts
   * nothing); its result lets that child's feed finish.
   */
  private followChildren(r: EventRecord): void {
    const p = r.payload;
    if (p.copiedFrom !== undefined) return;
    if (r.type === 'tool/result') {
      void this.openCalls.get(String(p.callId))?.finish();
      this.openCalls.delete(String(p.callId));
      return;
    }
    if (r.type !== 'tool/call' || p.resumable !== true) return;
    const callId = String(p.callId);
    const childId = childSessionId({ sessionId: this.sessionId, idempotencyKey: String(p.idempotencyKey) });
    if (this.children.has(childId)) return;
    const wrap = (frame: ChildFrame['frame']): ChildFrame => ({ kind: 'child', callId, callSeq: r.seq, sessionId: childId, frame });
    const out: FeedOutput = {
      send: (frame) => this.out.send(wrap(frame as ChildFrame['frame'])),
      waitForRoom: () => this.out.waitForRoom(),
      hasRoom: () => this.out.hasRoom(),
      drop: (reason) => this.out.drop(reason),
    };
    const options: FeedOptions = { capacity: this.o.capacity, pollMs: this.o.pollMs, children: this.o.children! };
    const live = this.o.children!(childId);
    if (live) options.live = live;
    const feed = new SessionFeed(this.store, childId, 1, options, out, this.abort.signal);
    this.children.set(childId, feed);
    this.openCalls.set(callId, feed);
    feed.run().catch((e: unknown) => {
      const err = e as Error;
      out.send({ kind: 'stream-error', name: e instanceof ActorloopError ? err.name : 'Error', message: err.message });
    });
  }

  /** Live-only envelopes of the session running here; committed ones come from the log. */
  private onLive(env: Envelope): void {
    if (this.abort.signal.aborted) return;
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
      if (!this.out.hasRoom()) return this.out.drop('capacity');
      this.out.send(frame);
    }
  }
}
