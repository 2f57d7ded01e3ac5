import { z } from 'zod';
import type { EventRecord, PendingRequest } from '../contracts/events.js';
import { ValidationError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import { IdInput } from '../contracts/ids.js';
import type { EventStore } from '../persistence/event-store.js';
import { awaitedRequest } from '../persistence/open-run.js';
import type { SessionHead } from '../persistence/head.js';
import { assertSessionId } from '../persistence/store-input.js';
import { errorResponse, EventStream, type FrameEncoder, SessionEventsOptions } from './session-events.js';
import { type ReplyTarget, UIChunkMapper } from './ui-chunks.js';
import { replyMessageId, type UIChunk, userMessageId } from './ui-protocol.js';
import type { Frame } from './wire.js';

/** The headers of the AI SDK's UI message stream protocol (what `createUIMessageStreamResponse` sends). */
export const UI_MESSAGE_STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-vercel-ai-ui-message-stream': 'v1',
  'x-accel-buffering': 'no',
} as const;

export const UIMessageStreamOptions = SessionEventsOptions.extend({
  /**
   * The reply to stream: `'open'` (default) the reply of the session's open run, replayed from
   * its user message, else the reply to the newest input accepted and not yet run (a 204 when
   * there is neither, or the run waits for an answer), or `{ inputId }` the
   * reply to that input's user message, from the log's position `fromSeq` on (default 1).
   */
  reply: z
    .union([z.literal('open'), z.strictObject({ inputId: IdInput, fromSeq: z.number().int().positive().optional() })])
    .default('open'),
});
export type UIMessageStreamOptions = z.input<typeof UIMessageStreamOptions>;

/**
 * A session's reply as the AI SDK's UI message stream (`useChat`'s protocol: SSE `data:` lines
 * of UI message chunks, then `data: [DONE]`), mapped from the log (`UIChunkMapper`). Each record's
 * last chunk carries `id:` = its log position, `N:step` while the client also holds the live
 * chunks of a step still streaming. Resuming (`reply: 'open'`, what `useChat`'s `resume` asks
 * for): without a `Last-Event-ID` the reply is replayed from its user message (the AI SDK
 * replaces the message it holds with the replay); with `Last-Event-ID: N` it continues after
 * position N: a `start` chunk, then the chunks of the records after N — none repeated, none
 * skipped; with `N:step`, `reset-step` first and the open step's records again — also when N is
 * inside the last settled run's reply, before its end (the run settled while the client was away).
 * A position past the log's head is a 400. A run waiting for an approval or an answer has no
 * stream (204); a reply
 * ends with `finish` when its run settles or suspends, or when the next run's user message comes.
 * @example
 * // app/api/chat/[id]/stream/route.ts (Next.js): useChat({ resume: true }) reconnects here
 * export const GET = (req: Request, { params }) => uiMessageStream(store, params.id, req)
 */
export async function uiMessageStream(
  store: EventStore,
  sessionId: string,
  request: Request,
  options: UIMessageStreamOptions = {},
): Promise<Response> {
  // the app's own options: a mistake there rejects with the app's ValidationError, not a client's 400
  const o = parseInput(UIMessageStreamOptions, options, 'uiMessageStream: options');
  let cursor: ReplyCursor | undefined;
  try {
    assertSessionId(sessionId, 'uiMessageStream');
    cursor = replyCursorOf(request);
  } catch (e) {
    return errorResponse(400, e);
  }
  const { reply, ...streamOptions } = o;
  if (cursor) {
    // a position the log does not have (yet): the client's message is not this log's reply
    const lastSeq = (await store.getHead(sessionId))?.lastSeq ?? 0;
    if (cursor.seq > lastSeq)
      return errorResponse(
        400,
        new ValidationError('uiMessageStream', [
          { path: ['Last-Event-ID'], message: `position ${cursor.seq} is past the log's head (${lastSeq})` },
        ]),
      );
  }
  if (reply !== 'open') {
    const head = await store.getHead(sessionId);
    const mapper = new UIChunkMapper(
      { kind: 'input', inputId: reply.inputId },
      { sessionId, knownLastSeq: head?.lastSeq ?? 0, ...(head?.openRun ? { run: head.openRun } : {}) },
    );
    return respond(store, sessionId, request, streamOptions, mapper, reply.fromSeq ?? 1, []);
  }
  const open = await readOpenReply(store, sessionId);
  if (cursor && (!open || cursor.seq < open.userSeq)) {
    // the client's reply settled while it was away (a queued input's run may have started since):
    // it gets the rest after its position, to its end
    const ended = await readSettledReply(store, sessionId, cursor.seq);
    if (ended)
      return continueReply(store, sessionId, request, streamOptions, ended, Math.max(cursor.seq, ended.userSeq - 1) + 1, cursor.liveStep);
  }
  if (!open || open.waiting) {
    // no reply under way, but a message accepted and not yet run: its reply is the one to come
    const head = await store.getHead(sessionId);
    const next = open ? undefined : await nextInput(store, sessionId, head);
    if (!next) return new Response(null, { status: 204, headers: { 'cache-control': 'no-store' } });
    const mapper = new UIChunkMapper({ kind: 'input', inputId: next.inputId }, { sessionId, knownLastSeq: head?.lastSeq ?? 0 });
    return respond(store, sessionId, request, streamOptions, mapper, next.fromSeq, []);
  }
  const after = cursor && cursor.seq >= open.userSeq ? cursor : { seq: open.userSeq - 1, liveStep: false };
  return continueReply(store, sessionId, request, streamOptions, open, after.seq + 1, after.liveStep);
}

/**
 * A reply stream's position: `Last-Event-ID: N` (the client holds the reply's chunks up to log
 * position N) or `N:step` (and the live chunks of the step streaming after it: a start-step, text
 * not committed yet). Throws a ValidationError for a malformed value.
 */
export interface ReplyCursor {
  seq: number;
  liveStep: boolean;
}
function replyCursorOf(request: Request): ReplyCursor | undefined {
  const raw = request.headers.get('last-event-id')?.trim();
  if (!raw) return undefined;
  const m = /^(\d{1,15})(:step)?$/.exec(raw);
  if (!m)
    throw new ValidationError('uiMessageStream', [
      { path: ['Last-Event-ID'], message: `${JSON.stringify(raw.slice(0, 40))} is not a reply position (N or N:step, N a log position)` },
    ]);
  return { seq: Number(m[1]), liveStep: m[2] !== undefined };
}

/**
 * The newest prompt accepted and not yet run: in the log (`input/accepted`, a run was busy), or
 * still in the inbox (submitted, not yet applied by a worker); where its reply will start.
 */
async function nextInput(
  store: EventStore,
  sessionId: string,
  head: SessionHead | undefined,
): Promise<{ inputId: string; fromSeq: number } | undefined> {
  const logged = head?.pendingInputs.findLast((i) => i.mode === 'follow_up');
  if (logged) return { inputId: logged.inputId, fromSeq: logged.seq };
  const inbox = (await store.work?.pending(sessionId)) ?? [];
  const entry = inbox.findLast((e) => e.entry.kind === 'input' && e.entry.mode === 'follow_up')?.entry;
  return entry?.kind === 'input' ? { inputId: entry.inputId, fromSeq: (head?.lastSeq ?? 0) + 1 } : undefined;
}

/** The reply of the session's open run: its records from its user message to the head. */
export interface OpenReply {
  userSeq: number;
  /** The user message's id (its input id, else `u<seq>`). */
  userId: string;
  messageId: string;
  run: { runId: string; kind: string };
  records: EventRecord[];
  lastSeq: number;
  /**
   * The run waits for an approval or an answer (its newest attempt ended suspended) — not when a
   * cancel stands (recorded after that end: the run ends cancelled when it next runs).
   */
  waiting: boolean;
  /** The approval or question it waits for (none once its cancel stands: see `awaitedRequest`). */
  pending?: PendingRequest;
  /** A cancel stands: recorded after the run's newest end, it ends the run cancelled when it next runs. */
  cancelRequested: boolean;
}

/** Reads the open run (O(run), never older history) and returns its reply (from the run's first user message), if any. */
export async function readOpenReply(store: EventStore, sessionId: string): Promise<OpenReply | undefined> {
  const head = await store.getHead(sessionId);
  if (!head?.openRun) return undefined;
  return readReply(store, sessionId, head.openRun, head.lastSeq);
}

/**
 * The reply of the session's last settled run when position `seq` falls inside it before its end
 * (a client cut off while it ran, back after it settled), read from the run's start to its end.
 */
async function readSettledReply(store: EventStore, sessionId: string, seq: number): Promise<OpenReply | undefined> {
  const run = (await store.getHead(sessionId))?.lastSettledRun;
  if (!run?.endSeq || seq < run.startSeq || seq >= run.endSeq) return undefined;
  return readReply(store, sessionId, run, run.endSeq);
}

async function readReply(
  store: EventStore,
  sessionId: string,
  pointer: { runId: string; startSeq: number },
  toSeq: number,
): Promise<OpenReply | undefined> {
  let reply: OpenReply | undefined;
  let run = { runId: pointer.runId, kind: 'prompt' };
  let waiting = false;
  let pending: { pendingRequest: PendingRequest } | undefined;
  let cancelRequested: true | undefined;
  let runInputId: string | undefined;
  for await (const r of store.readEvents(sessionId, { fromSeq: pointer.startSeq, toSeq })) {
    const p = r.payload;
    // the run's first user message opens its reply; a later one is a steer shown in it, or more of its input
    if (r.type === 'user/message' && p.copiedFrom === undefined && !reply) {
      const id = userMessageId(r, runInputId);
      runInputId = undefined;
      reply = {
        userSeq: r.seq,
        userId: id,
        messageId: replyMessageId(id),
        run,
        records: [],
        lastSeq: r.seq,
        waiting: false,
        cancelRequested: false,
      };
    }
    if (r.type === 'run/start') {
      run = { runId: String(p.runId), kind: String(p.kind) };
      runInputId = typeof p.inputId === 'string' ? p.inputId : undefined;
      waiting = false;
    } else if (r.type === 'run/end') {
      waiting = p.status === 'suspended';
      cancelRequested = undefined; // (the attempt that ended had it)
    } else if (r.type === 'cancellation/requested') cancelRequested = true;
    else if (r.type === 'approval/requested' || r.type === 'question/asked')
      pending = { pendingRequest: p.pendingRequest as PendingRequest };
    else if (r.type === 'approval/decided') pending = undefined;
    reply?.records.push(r);
  }
  if (!reply) return undefined;
  const awaited = awaitedRequest({ ...(pending ? { pending } : {}), cancelRequested });
  return {
    ...reply,
    lastSeq: toSeq,
    waiting: waiting && !cancelRequested,
    cancelRequested: cancelRequested === true,
    ...(awaited ? { pending: awaited } : {}),
  };
}

/**
 * Streams the open reply from `fromSeq` on: the records before it (from its user message) only
 * bring the mapper to where the client is, and a `start` chunk opens the client's message. A
 * client that holds the live chunks of a step still streaming (`liveStep`) gets `reset-step`
 * first, which drops them: the step's records bring its parts once; a step opened by a record
 * the client has is sent again from that record on.
 */
export function continueReply(
  store: EventStore,
  sessionId: string,
  request: Request,
  options: z.output<typeof SessionEventsOptions>,
  open: OpenReply,
  fromSeq: number,
  liveStep = false,
): Response {
  const mapper = new UIChunkMapper({ kind: 'next' }, { sessionId, knownLastSeq: open.lastSeq, run: open.run, runInputId: open.userId });
  const opening: UIChunk[] = fromSeq > open.userSeq ? [{ type: 'start', messageId: open.messageId }] : [];
  let from = fromSeq;
  if (liveStep && fromSeq > open.userSeq) {
    opening.push({ type: 'reset-step' });
    from = (openStepStart(open.records, fromSeq - 1) ?? fromSeq - 1) + 1;
  }
  for (const r of open.records) if (r.seq < from) mapper.committed(r);
  if (liveStep && from === fromSeq && fromSeq > open.userSeq) mapper.continueLiveStep();
  return respond(store, sessionId, request, options, mapper, from, opening);
}

/** The seq of the step/start whose step is open after position `n` (as UIChunkMapper counts steps). */
function openStepStart(records: EventRecord[], n: number): number | undefined {
  let at: number | undefined;
  for (const r of records) {
    if (r.seq > n) break;
    if (r.type === 'step/start') at = r.seq;
    else if (r.type === 'step/end' || r.type === 'run/start' || r.type === 'user/message') at = undefined;
  }
  return at;
}

function respond(
  store: EventStore,
  sessionId: string,
  request: Request,
  options: z.output<typeof SessionEventsOptions>,
  mapper: UIChunkMapper,
  fromSeq: number,
  opening: UIChunk[],
): Response {
  // child sessions are not followed: the chat shows the call and its output
  const stream = new EventStream(
    store,
    sessionId,
    fromSeq,
    { ...options, children: false },
    request.signal,
    new UIChunkEncoder(mapper, opening, fromSeq - 1),
  );
  return new Response(stream.body, { status: 200, headers: UI_MESSAGE_STREAM_HEADERS });
}

const encoder = new TextEncoder();
const chunkLine = (c: UIChunk | '[DONE]', id?: string) =>
  encoder.encode(`${id !== undefined ? `id: ${id}\n` : ''}data: ${c === '[DONE]' ? c : JSON.stringify(c)}\n\n`);

/**
 * The frames of a connection as UI message chunks. The `id:` a chunk carries is the position the
 * client's message then stands for: each record's last chunk carries its log position, `N:step`
 * while the message also holds a live step's chunks (the first live chunk that adds one says so).
 */
class UIChunkEncoder implements FrameEncoder {
  private sentId: string | undefined;

  constructor(
    private readonly mapper: UIChunkMapper,
    private readonly opening: UIChunk[],
    /** The last log position mapped. */
    private position: number,
  ) {}

  private positionId(): string {
    return this.mapper.holdsLive ? `${this.position}:step` : String(this.position);
  }

  private lines(chunks: UIChunk[], always: boolean): Uint8Array[] {
    const id = this.positionId();
    const mark = chunks.length > 0 && (always || id !== this.sentId);
    if (mark) this.sentId = id;
    return chunks.map((c, i) => chunkLine(c, mark && i === chunks.length - 1 ? id : undefined));
  }

  encode(frame: Frame): { bytes: Uint8Array[]; end?: boolean } {
    switch (frame.kind) {
      case 'ready':
        return { bytes: this.opening.map((c) => chunkLine(c)) };
      case 'committed': {
        const { chunks, end } = this.mapper.committed(frame.record);
        this.position = frame.record.seq;
        const bytes = this.lines(chunks, true);
        if (end) bytes.push(chunkLine('[DONE]'));
        return { bytes, ...(end ? { end } : {}) };
      }
      case 'live':
        return { bytes: this.lines(this.mapper.live(frame.event), false) };
      case 'dropped':
        return {
          bytes: [
            chunkLine({ type: 'error', errorText: `the stream fell behind (${frame.reason}) after log position ${frame.lastLogSeq}` }),
          ],
          end: true,
        };
      case 'stream-error':
        return { bytes: [chunkLine({ type: 'error', errorText: `${frame.name}: ${frame.message}` })], end: true };
      case 'child': // a sub-agent's progress is not a part of the chat's messages (its answer is the call's output)
        return { bytes: [] };
    }
  }
}

export type { ReplyTarget };
