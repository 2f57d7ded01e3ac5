import type { StoredContent } from '../contracts/content.js';
import type { PendingRequest } from '../contracts/events.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { ChildFrame, CommittedFrame, Frame, LiveFrame } from './wire.js';

/**
 * A session's state for a UI, folded from its web stream's frames (`reduceView`). Browser-safe.
 * Everything but `streaming` comes from committed records, so two tabs, or one tab before and
 * after a reconnect, show the same items.
 */

/**
 * A message's content as the view shows it: its text, then `[image]` / `[file <name>]` for each
 * other part (the page bundle takes nothing outside src/web, so not contracts' contentDisplay).
 */
function shown(content: StoredContent): string {
  if (typeof content === 'string') return content;
  const text = content.map((p) => (p.type === 'text' ? p.text : '')).join('');
  const parts = content.flatMap((p) => (p.type === 'text' ? [] : [p.type === 'file' ? `[file ${p.filename ?? p.mediaType}]` : '[image]']));
  return [text, ...parts].filter(Boolean).join(' ');
}

/** A session's items as its frames show them: the page's session, or a child session under its call. */
export interface ChildView {
  sessionId: string;
  /** The last log position folded in: the cursor a reconnect resumes after. */
  lastLogSeq: number;
  /** Committed frames received again at or before `lastLogSeq` (ignored; a child's log is sent whole on every connection). */
  repeats: number;
  items: ViewItem[];
  /** The live text of the message being streamed on this connection (dropped at a reconnect). */
  streaming?: { runId: string; text: string };
  /** The approval or question the session waits for. */
  pending?: PendingRequest;
  /** The newest run's status: `running`, or its `run/end` status. */
  runStatus?: string;
  /** A `stream-error`: for a child, its log could not be read (the parent's stream goes on). */
  error?: { name: string; message: string };
}

export interface SessionView extends ChildView {
  connection: 'connecting' | 'open' | 'reconnecting' | 'closed';
  /** Connections made after the first. */
  reconnects: number;
  dropped?: { reason: string; lastLogSeq: number };
}

export type ViewItem =
  | { kind: 'user'; seq: number; runId?: string; text: string }
  | { kind: 'assistant'; seq: number; runId?: string; text: string }
  | {
      kind: 'tool';
      seq: number;
      callId: string;
      name: string;
      arguments: unknown;
      progress?: unknown;
      outcome?: ToolOutcome;
      /** An agentTool call's child session, folded from its `child` frames. */
      child?: ChildView;
    }
  | { kind: 'approval'; seq: number; pendingRequest: PendingRequest; decisions?: unknown }
  | { kind: 'final'; seq: number; runId?: string; text: string }
  | { kind: 'run'; seq: number; runId?: string; status: string }
  /** A new writer attached while a run was running (no run/end): it was cut off, and resumes in a new process. */
  | { kind: 'resumed'; seq: number };

/** What a client yields besides the server's frames: the connection's state. */
export interface ConnectionItem {
  kind: 'connection';
  state: 'open' | 'reconnecting' | 'closed';
  /** Connections made after the first. */
  attempt: number;
  lastLogSeq: number;
  error?: string;
}

export type StreamItem = Frame | ConnectionItem;

export const initialView = (sessionId: string): SessionView => ({
  sessionId,
  connection: 'connecting',
  lastLogSeq: 0,
  repeats: 0,
  reconnects: 0,
  items: [],
});

/**
 * Folds one item of the stream into the view (pure: returns a new view).
 * @example
 * let view = initialView('s1')
 * for await (const item of sessionStream({ url: '/sessions/s1/events' })) view = reduceView(view, item)
 */
export function reduceView(view: SessionView, item: StreamItem): SessionView {
  switch (item.kind) {
    case 'connection': {
      const { streaming: _dropped, ...rest } = view; // half a message is never shown twice: the log has it
      return { ...rest, connection: item.state, reconnects: item.attempt };
    }
    case 'ready':
      return view;
    case 'dropped':
      return { ...view, dropped: { reason: item.reason, lastLogSeq: item.lastLogSeq } };
    case 'stream-error':
      return { ...view, error: { name: item.name, message: item.message } };
    case 'child':
      return withChild(view, item);
    case 'live':
      return live(view, item);
    case 'committed':
      return committed(view, item);
  }
}

/** A frame of an agent call's child session folded into that call's item (the one of its `tool/call` record). */
function withChild<V extends ChildView>(view: V, f: ChildFrame): V {
  const at = view.items.findLastIndex((i) => i.kind === 'tool' && i.seq === f.callSeq);
  if (at < 0) return view; // its call's record comes first on every connection
  const call = view.items[at] as Extract<ViewItem, { kind: 'tool' }>;
  const child = call.child ?? { sessionId: f.sessionId, lastLogSeq: 0, repeats: 0, items: [] };
  const frame = f.frame;
  const next =
    frame.kind === 'child'
      ? withChild(child, frame)
      : frame.kind === 'live'
        ? live(child, frame)
        : frame.kind === 'committed'
          ? committed(child, frame)
          : { ...child, error: { name: frame.name, message: frame.message } };
  return { ...view, items: view.items.map((i, k) => (k === at ? { ...call, child: next } : i)) };
}

function live<V extends ChildView>(view: V, item: LiveFrame): V {
  const e = item.event;
  if (e.type === 'message_start') return { ...view, streaming: { runId: item.runId, text: '' } };
  if (e.type === 'message_delta') return { ...view, streaming: { runId: item.runId, text: (view.streaming?.text ?? '') + e.text } };
  if (e.type === 'message_end') {
    const { streaming: _discarded, ...rest } = view;
    return rest as V;
  }
  if (e.type === 'tool_update')
    return {
      ...view,
      items: view.items.map((i) => (i.kind === 'tool' && i.callId === e.callId && !i.outcome ? { ...i, progress: e.update } : i)),
    };
  return view;
}

function committed<V extends ChildView>(view: V, f: CommittedFrame): V {
  if (f.logSeq <= view.lastLogSeq) return { ...view, repeats: view.repeats + 1 };
  const r = f.record;
  const p = r.payload as Record<string, unknown>;
  const v: V = { ...view, lastLogSeq: f.logSeq };
  const add = (item: ViewItem) => (v.items = [...v.items, item]);
  const runId = f.runId;
  switch (r.type) {
    case 'session/attached':
      if (view.runStatus === 'running') add({ kind: 'resumed', seq: r.seq }); // a run cut off without its run/end
      break;
    case 'run/start':
      v.runStatus = 'running';
      break;
    case 'user/message': {
      const m = p.message as { content: StoredContent };
      if (p.copiedFrom === undefined) add({ kind: 'user', seq: r.seq, ...(runId ? { runId } : {}), text: shown(m.content) });
      break;
    }
    case 'assistant/message': {
      const m = p.message as { content: StoredContent };
      if (m.content && p.copiedFrom === undefined)
        add({ kind: 'assistant', seq: r.seq, ...(runId ? { runId } : {}), text: shown(m.content) });
      delete v.streaming;
      break;
    }
    case 'tool/call':
      add({ kind: 'tool', seq: r.seq, callId: String(p.callId), name: String(p.name), arguments: p.arguments });
      break;
    case 'tool/result':
      v.items = v.items.map((i) =>
        i.kind === 'tool' && i.callId === p.callId && !i.outcome ? { ...i, outcome: p.outcome as ToolOutcome } : i,
      );
      break;
    case 'approval/requested':
      v.pending = p.pendingRequest as PendingRequest;
      add({ kind: 'approval', seq: r.seq, pendingRequest: v.pending });
      break;
    case 'question/asked':
      v.pending = p.pendingRequest as PendingRequest;
      break;
    case 'approval/decided':
      delete v.pending;
      v.items = v.items.map((i) => (i.kind === 'approval' && !i.decisions ? { ...i, decisions: p.decisions ?? p } : i));
      break;
    case 'cancellation/requested': // the run waits for nothing now: it ends cancelled (even after a crash)
      delete v.pending;
      break;
    case 'final/message': {
      // the model's answer is shown once: the assistant message it was becomes the final answer
      const text = String(p.content);
      const at = v.items.findLastIndex((i) => i.kind === 'assistant' && i.text === text);
      const final: ViewItem = { kind: 'final', seq: r.seq, ...(runId ? { runId } : {}), text };
      if (at >= 0 && v.items.slice(at + 1).every((i) => i.kind !== 'user')) v.items = v.items.map((i, k) => (k === at ? final : i));
      else add(final);
      break;
    }
    case 'run/end':
      v.runStatus = String(p.status);
      if (p.status !== 'suspended') delete v.pending;
      add({ kind: 'run', seq: r.seq, ...(runId ? { runId } : {}), status: String(p.status) });
      break;
    default: // the other events change nothing the page shows
      break;
  }
  return v;
}
