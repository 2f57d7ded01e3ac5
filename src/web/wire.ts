import type { EventRecord } from '../contracts/events.js';
import type { LiveEvent } from '../streams/envelopes.js';

/**
 * The frames of a session's web stream (`sessionEvents`), one SSE event each. Shared by the
 * server and the browser client: this module holds types and constants only (no Node import).
 *
 * - `ready` (no `id:`): sent first; where the replay starts and whether live deltas may come.
 * - `committed` (`id:` = the record's log position): one per committed log record, in seq order,
 *   each exactly once across reconnects; `events` are the envelopes it announces.
 * - `live` (no `id:`): a live-only envelope (model text deltas, tool progress) of a run in the
 *   serving process; never repeated after a reconnect.
 * - `dropped`: the client fell behind its capacity; the stream ends, reconnect from `lastLogSeq`.
 * - `stream-error`: the log could not be read (a typed store error); the stream ends.
 * - `child` (no `id:`): a frame of the child session of an agentTool call (`committed`, `live`,
 *   `stream-error`, or a `child` frame of its own child), naming the parent's call and the child
 *   session; a child's log is sent whole on every connection (a client keeps each child's cursor).
 */
export const FRAME_EVENTS = ['ready', 'committed', 'live', 'dropped', 'stream-error', 'child'] as const;
export type FrameEvent = (typeof FRAME_EVENTS)[number];

/** The log record as the stream sends it (its session id is the stream's). */
export type WireRecord = Pick<EventRecord, 'seq' | 'eventId' | 'type' | 'turn' | 'step' | 'attempt' | 'occurredAt' | 'payload'>;

export interface ReadyFrame {
  kind: 'ready';
  sessionId: string;
  /** The first log position this connection sends (the cursor + 1). */
  fromSeq: number;
  /** Whether live deltas may come on this connection (the session can run in the serving process). */
  live: boolean;
}

export interface CommittedFrame {
  kind: 'committed';
  logSeq: number;
  /** The run the record belongs to, when the stream knows it (its `run/start` was read or is open). */
  runId?: string;
  record: WireRecord;
  /** The envelope events this record announces (DESIGN §6): `run_start`, `tool_start`, `tool_end`, `message_end`, … */
  events: LiveEvent[];
}

export interface LiveFrame {
  kind: 'live';
  runId: string;
  attemptId: string;
  /** The newest log position the session had committed when this was emitted; sent after it. */
  afterLogSeq: number;
  event: LiveEvent;
}

export interface DroppedFrame {
  kind: 'dropped';
  reason: 'capacity' | 'stalled';
  capacity: number;
  /** The last log position sent: reconnecting with it as `Last-Event-ID` resumes with no gap. */
  lastLogSeq: number;
}

export interface StreamErrorFrame {
  kind: 'stream-error';
  name: string;
  message: string;
}

/** A frame of the child session an agentTool call of this session runs (docs/agents.md). */
export interface ChildFrame {
  kind: 'child';
  /** The parent's call the child session answers. */
  callId: string;
  /** The log position of the parent's `tool/call` record of that call (call ids may repeat across runs). */
  callSeq: number;
  /** The child session's id. */
  sessionId: string;
  /** The child's frame: a `stream-error` is the child's log only; the parent's stream goes on. */
  frame: CommittedFrame | LiveFrame | StreamErrorFrame | ChildFrame;
}

export type Frame = ReadyFrame | CommittedFrame | LiveFrame | DroppedFrame | StreamErrorFrame | ChildFrame;
