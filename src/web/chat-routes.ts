import { z } from 'zod';
import { ValidationError } from '../contracts/errors.js';
import { contentText } from '../contracts/content-text.js';
import type { EventRecord } from '../contracts/events.js';
import type { InboxEntry, InboxReceipt } from '../contracts/inbox.js';
import type { EventStore } from '../persistence/event-store.js';
import type { SessionEventsOptions } from './session-events.js';
import { uiMessagesOf } from './ui-messages.js';
import { continueReply, readOpenReply, uiMessageStream } from './ui-message-stream.js';

/**
 * The body `useChat`'s default transport POSTs (`DefaultChatTransport`): the chat id (the session
 * id), every message the client holds, what triggered the request, and the message it concerns.
 * Nothing else: an app's extra `body` fields are refused (the server reads the log, not the
 * client's copy of it).
 */
const MessageId = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[A-Za-z0-9._:~-]+$/, 'letters, digits and . _ : ~ - (it becomes the input id)');
const ClientMessage = z.strictObject({
  id: z.string().min(1).max(400),
  role: z.enum(['system', 'user', 'assistant']),
  metadata: z.unknown().optional(),
  parts: z.array(z.looseObject({ type: z.string() })).max(100_000),
});
export const ChatRequestBody = z.strictObject({
  id: z.string().min(1).max(400),
  messages: z.array(ClientMessage).min(1),
  trigger: z.enum(['submit-message', 'regenerate-message']),
  messageId: z.string().min(1).max(400).optional(),
});
export type ChatRequestBody = z.infer<typeof ChatRequestBody>;

/** A user message's text: text parts only (a file or any other part is refused). */
const UserParts = z
  .array(
    z.strictObject({
      type: z.literal('text', 'only text parts are taken from a user message'),
      text: z.string(),
      state: z.string().optional(),
    }),
  )
  .min(1);
const ApprovalResponse = z.looseObject({
  toolCallId: z.string(),
  state: z.literal('approval-responded'),
  approval: z.looseObject({ id: z.string(), approved: z.boolean() }),
});

/**
 * What a chat POST submits: the last message, a user's, as an input whose id is the message's
 * (a retried POST is the same input), or the approval responses of the last (assistant) message
 * as the answer to the approval the session waits for.
 */
export type ChatSubmission =
  | { kind: 'prompt'; entry: Extract<InboxEntry, { kind: 'input' }> }
  | { kind: 'approval'; decisions: Map<string, 'approve' | 'deny'> };

export function chatSubmission(body: ChatRequestBody): ChatSubmission {
  if (body.trigger === 'regenerate-message')
    throw new ValidationError('POST chat', [
      { path: ['trigger'], message: "regenerate-message is not supported: the session's log is append-only; send a new message" },
    ]);
  const last = body.messages.at(-1)!;
  const at = ['messages', body.messages.length - 1];
  if (last.role === 'user') {
    const id = MessageId.safeParse(last.id);
    if (!id.success) throw new ValidationError('POST chat', [{ path: [...at, 'id'], message: id.error.issues[0]!.message }]);
    const parts = UserParts.safeParse(last.parts);
    if (!parts.success)
      throw new ValidationError(
        'POST chat',
        parts.error.issues.map((i) => ({
          path: [...at, 'parts', ...i.path.map((k) => (typeof k === 'number' ? k : String(k)))],
          message: i.message,
        })),
      );
    const message = parts.data.map((p) => p.text).join('');
    if (message.trim() === '' || message.length > 100_000)
      throw new ValidationError('POST chat', [{ path: [...at, 'parts'], message: 'the text must be 1–100000 characters' }]);
    return { kind: 'prompt', entry: { kind: 'input', inputId: id.data, mode: 'follow_up', message } };
  }
  const decisions = new Map<string, 'approve' | 'deny'>();
  for (const part of last.parts) {
    const r = ApprovalResponse.safeParse(part);
    if (r.success) decisions.set(r.data.toolCallId, r.data.approval.approved ? 'approve' : 'deny');
  }
  if (last.role !== 'assistant' || decisions.size === 0)
    throw new ValidationError('POST chat', [
      { path: at, message: 'the last message must be a user message, or an assistant message with tool approval responses' },
    ]);
  return { kind: 'approval', decisions };
}

type Submit = (sessionId: string, entry: InboxEntry) => Promise<InboxReceipt>;
const STATUS: Record<InboxReceipt['status'], number> = { accepted: 202, already_accepted: 200, refused: 409 };

/**
 * Submits what a chat POST carries (`runtime.submit`, as the other POST routes) and answers with
 * the reply's UI message stream: a prompt's reply from its user message, an approval's as the
 * continuation of the message the client holds. A refused entry is a 409 with the receipt.
 */
export async function chatPost(
  store: EventStore,
  submit: Submit,
  sessionId: string,
  request: Request,
  submission: ChatSubmission,
  stream: z.output<typeof SessionEventsOptions>,
): Promise<Response> {
  if (submission.kind === 'prompt') {
    const before = await store.getHead(sessionId);
    // (the last read before the submit: a run that began waiting meanwhile is seen)
    const refused = await waitingForClient(store, sessionId, submission.entry.inputId);
    if (refused) return refused;
    const receipt = await submit(sessionId, submission.entry);
    if (receipt.status === 'refused') return json(STATUS.refused, receipt);
    // an input accepted now starts after the head; one accepted before (a retry) is found from the start
    const fromSeq = receipt.status === 'accepted' ? (before?.lastSeq ?? 0) + 1 : 1;
    return uiMessageStream(store, sessionId, request, { ...stream, reply: { inputId: submission.entry.inputId, fromSeq } });
  }
  const open = await readOpenReply(store, sessionId);
  const pending = open?.pending;
  if (!open || pending?.kind !== 'approval') {
    const why = open?.cancelRequested ? ` (run ${open.run.runId} was cancelled: it ends cancelled when it next runs)` : '';
    return json(409, {
      error: 'NothingToApprove',
      message: `session ${JSON.stringify(sessionId.slice(0, 200))} waits for no approval${why}`,
    });
  }
  const missing = pending.calls.filter((c) => !submission.decisions.has(c.callId)).map((c) => c.callId);
  if (missing.length > 0)
    return json(400, {
      error: 'ValidationError',
      message: `every call waiting for approval needs a response; missing: ${missing.join(', ')}`,
      issues: [{ path: ['messages'], message: `no approval response for ${missing.join(', ')}` }],
    });
  const decisions: Record<string, 'approve' | 'deny'> = Object.create(null);
  for (const c of pending.calls) decisions[c.callId] = submission.decisions.get(c.callId)!;
  const entry: InboxEntry = {
    kind: 'respond',
    entryId: `respond-${pending.questionId}`,
    questionId: pending.questionId,
    answer: { decisions },
  };
  const receipt = await submit(sessionId, entry);
  if (receipt.status === 'refused') return json(STATUS.refused, receipt);
  return continueReply(store, sessionId, request, stream, { ...open, waiting: false }, open.lastSeq + 1);
}

/**
 * A 409 for a new message while the session's run waits for this client's approval or answer:
 * submitted, it would wait behind that run — its stream silent, the chat stuck "submitted" until
 * the approval it cannot send meanwhile. Nothing is submitted. A message already accepted (a
 * retry) goes on to its reply.
 */
async function waitingForClient(store: EventStore, sessionId: string, inputId: string): Promise<Response | undefined> {
  const open = await readOpenReply(store, sessionId);
  if (!open?.waiting || !open.pending || open.userId === inputId) return undefined;
  if (await store.work?.getEntry(sessionId, inputId)) return undefined;
  const what =
    open.pending.kind === 'approval'
      ? `the approval of ${open.pending.calls.map((c) => `${c.name} (${c.callId})`).join(', ')}`
      : `the answer to question ${open.pending.questionId} (POST /sessions/:id/respond)`;
  return json(409, {
    error: 'AwaitingResponse',
    message: `run ${open.run.runId} of session ${JSON.stringify(sessionId.slice(0, 200))} waits for ${what}: send that first`,
    pendingRequest: open.pending,
  });
}

/**
 * `GET /chat/:id/messages`: the session's conversation as UI messages (useChat's `messages`),
 * ending with the prompts accepted and not yet run (in the log, or still in the inbox).
 */
export async function chatHistory(store: EventStore, sessionId: string): Promise<Response> {
  const records: EventRecord[] = [];
  for await (const r of store.readEvents(sessionId)) records.push(r);
  const messages = uiMessagesOf(records, sessionId);
  // a prompt submitted and not yet taken from the inbox by a worker is the conversation's too
  const known = new Set(messages.map((m) => m.id));
  for (const { entry } of (await store.work?.pending(sessionId)) ?? [])
    if (entry.kind === 'input' && entry.mode === 'follow_up' && !known.has(entry.inputId))
      messages.push({
        id: entry.inputId,
        role: 'user',
        parts: [{ type: 'text', text: promptText(entry.message) }],
      });
  return json(200, messages);
}

const promptText = (m: Extract<InboxEntry, { kind: 'input' }>['message']): string =>
  typeof m === 'string' ? m : Array.isArray(m) ? m.map((x) => contentText(x.content)).join('\n') : contentText(m.content);

/** One row of `GET /sessions`. */
export interface SessionListItem {
  sessionId: string;
  lastSeq: number;
  /** When its newest record was written (ISO 8601). */
  updatedAt?: string;
  /** A run is open (running, waiting for an answer, or cut off and to be resumed). */
  open: boolean;
}

/**
 * `GET /sessions?limit=N`: the sessions this request may read (`allowed`), most recently written
 * first, at most `limit` (default 50, at most 500). Reads every allowed session's head and newest
 * record: O(sessions).
 */
export async function sessionList(
  store: EventStore,
  request: Request,
  allowed: (sessionId: string) => Promise<Response | boolean>,
): Promise<Response> {
  const raw = new URL(request.url).searchParams.get('limit');
  const limit = raw === null ? 50 : /^\d{1,3}$/.test(raw) ? Number(raw) : NaN;
  if (!(limit >= 1 && limit <= 500))
    return json(400, {
      error: 'ValidationError',
      message: 'limit: a whole number from 1 to 500',
      issues: [{ path: ['limit'], message: 'from 1 to 500' }],
    });
  const rows: SessionListItem[] = [];
  for (const sessionId of await store.listSessions()) {
    const verdict = await allowed(sessionId);
    if (verdict instanceof Response) return verdict; // not signed in, say: the app's answer, as it is
    if (!verdict) continue;
    const head = await store.getHead(sessionId);
    if (!head) continue;
    let updatedAt: string | undefined;
    for await (const r of store.readEvents(sessionId, { fromSeq: head.lastSeq, toSeq: head.lastSeq })) updatedAt = r.occurredAt;
    rows.push({ sessionId, lastSeq: head.lastSeq, ...(updatedAt ? { updatedAt } : {}), open: head.openRun !== null });
  }
  rows.sort((a, b) => (b.updatedAt ?? '').localeCompare(a.updatedAt ?? '') || a.sessionId.localeCompare(b.sessionId));
  return json(200, { sessions: rows.slice(0, limit) });
}

export const json = (status: number, body: unknown): Response =>
  new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
  });
