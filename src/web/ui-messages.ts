import type { WireRecord } from './wire.js';
import { UIChunkMapper } from './ui-chunks.js';
import type { UIChunk, UIMessageMetadata } from './ui-protocol.js';

/** A part of a UI message, as the AI SDK's `UIMessage.parts` holds it (the kinds actorloop sends). */
export type UIMessagePart =
  | { type: 'text'; text: string; state?: 'streaming' | 'done' }
  | { type: 'reasoning'; id: string; text: string; state: 'streaming' | 'done' }
  | { type: 'step-start' }
  | { type: 'steering-message'; id: string; parts: { type: 'text'; text: string }[] }
  | {
      type: `tool-${string}`;
      toolCallId: string;
      state: 'input-available' | 'approval-requested' | 'approval-responded' | 'output-available' | 'output-error' | 'output-denied';
      input: unknown;
      output?: unknown;
      errorText?: string;
      approval?: { id: string; approved?: boolean };
    }
  | { type: `data-${string}`; id?: string; data: unknown };

/** A message as the AI SDK's `useChat` holds it (`UIMessage`): what the history endpoint returns. */
export interface UIMessage {
  id: string;
  role: 'user' | 'assistant';
  metadata?: UIMessageMetadata;
  parts: UIMessagePart[];
}

type ToolPart = Extract<UIMessagePart, { toolCallId: string }>;

/**
 * A session's conversation as UI messages, folded from its log: each user message (its id is
 * its input id; an input accepted and not yet run comes last), then the reply to it, built from exactly the chunks a stream of that reply
 * sends (`UIChunkMapper`), so that a page's history and a replayed stream agree part for part.
 * @example
 * const records = []; for await (const r of store.readEvents('s1')) records.push(r)
 * const messages = uiMessagesOf(records) // useChat({ id: 's1', messages })
 */
export function uiMessagesOf(records: Iterable<WireRecord>, sessionId?: string): UIMessage[] {
  const mapper = new UIChunkMapper({ kind: 'all' }, sessionId !== undefined ? { sessionId } : {});
  const messages: UIMessage[] = [];
  const reply = new UIMessageBuilder();
  const waiting = new Map<string, string>(); // inputs accepted and not yet consumed: their text
  for (const r of records) {
    if (r.type === 'input/accepted')
      waiting.set(String(r.payload.inputId), (r.payload.messages as { content: string }[]).map((m) => m.content).join('\n'));
    if (r.type === 'input/cancelled') waiting.delete(String(r.payload.inputId));
    const { chunks, user, steer, more } = mapper.committed(r);
    if (steer !== undefined) waiting.delete(steer);
    const asked = messages.at(-1);
    if (more !== undefined && asked?.role === 'user') asked.parts.push({ type: 'text', text: more });
    if (user) {
      waiting.delete(user.id);
      if (reply.message) messages.push(reply.message);
      reply.message = undefined;
      messages.push({ id: user.id, role: 'user', parts: [{ type: 'text', text: user.text }] });
    }
    for (const c of chunks) reply.apply(c);
  }
  if (reply.message) messages.push(reply.message);
  // a message accepted and not yet run is the conversation's too: a reload shows it, its reply follows
  for (const [id, text] of waiting) messages.push({ id, role: 'user', parts: [{ type: 'text', text }] });
  return messages;
}

/**
 * A tool part's outcome, its keys where the AI SDK's client keeps them: `output` and `errorText`
 * before an `approval` given earlier (its tool parts are made with those keys), so that both
 * serialize alike.
 */
function outcome(t: ToolPart, fields: Partial<ToolPart>): void {
  const { approval } = t;
  delete t.approval;
  Object.assign(t, fields);
  if (approval) t.approval = approval;
}

/** Applies UI message chunks to the message they build, as the AI SDK's client does. */
export class UIMessageBuilder {
  message: UIMessage | undefined;
  private readonly active = new Map<string, Extract<UIMessagePart, { text: string }>>();

  apply(c: UIChunk): void {
    if (c.type === 'start') {
      // the AI SDK's key order (`{ id, metadata, role, parts }`): its messages and these serialize alike
      this.message = { id: c.messageId, ...(c.messageMetadata ? { metadata: c.messageMetadata } : {}), role: 'assistant', parts: [] };
      this.active.clear();
      return;
    }
    const m = this.message;
    if (!m) return;
    switch (c.type) {
      case 'start-step':
        m.parts.push({ type: 'step-start' });
        break;
      case 'finish-step':
        this.active.clear();
        break;
      case 'reset-step': {
        const at = m.parts.findLastIndex((p) => p.type === 'step-start');
        m.parts.splice(at + 1);
        this.active.clear();
        break;
      }
      case 'text-start':
      case 'reasoning-start': {
        const part: Extract<UIMessagePart, { text: string }> =
          c.type === 'text-start'
            ? { type: 'text', text: '', state: 'streaming' }
            : { type: 'reasoning', id: c.id, text: '', state: 'streaming' };
        this.active.set(c.id, part);
        m.parts.push(part);
        break;
      }
      case 'text-delta':
      case 'reasoning-delta':
        this.active.get(c.id)!.text += c.delta;
        break;
      case 'text-end':
      case 'reasoning-end':
        this.active.get(c.id)!.state = 'done';
        this.active.delete(c.id);
        break;
      case 'tool-input-available':
        this.tool(m, c.toolCallId, c.toolName).input = c.input;
        break;
      case 'tool-input-error': {
        const t = this.tool(m, c.toolCallId, c.toolName);
        outcome(t, { state: 'output-error', input: c.input, errorText: c.errorText });
        break;
      }
      case 'tool-approval-request':
        Object.assign(this.tool(m, c.toolCallId), { state: 'approval-requested', approval: { id: c.approvalId } });
        break;
      case 'tool-approval-response': {
        const t = m.parts.find((p): p is ToolPart => 'approval' in p && p.approval?.id === c.approvalId);
        if (t) Object.assign(t, { state: 'approval-responded', approval: { id: c.approvalId, approved: c.approved } });
        break;
      }
      case 'tool-output-available':
        outcome(this.tool(m, c.toolCallId), { state: 'output-available', output: c.output });
        break;
      case 'tool-output-error':
        outcome(this.tool(m, c.toolCallId), { state: 'output-error', errorText: c.errorText });
        break;
      case 'tool-output-denied':
        this.tool(m, c.toolCallId).state = 'output-denied';
        break;
      case 'steering-message':
        m.parts.push({ type: 'steering-message', id: c.id, parts: c.parts.map((p) => ({ ...p })) });
        break;
      case 'finish':
      case 'error':
        break;
      default: {
        if ('transient' in c) break; // told to onData only, never kept in the message
        const existing = m.parts.find((p) => p.type === c.type && 'id' in p && p.id === c.id);
        if (existing && 'data' in existing) existing.data = c.data;
        else m.parts.push({ type: c.type, id: c.id, data: c.data });
      }
    }
  }

  private tool(m: UIMessage, toolCallId: string, toolName?: string): ToolPart {
    const found = m.parts.findLast((p): p is ToolPart => 'toolCallId' in p && p.toolCallId === toolCallId);
    if (found) return found;
    const part: ToolPart = { type: `tool-${toolName ?? 'unknown'}`, toolCallId, state: 'input-available', input: undefined };
    m.parts.push(part);
    return part;
  }
}
