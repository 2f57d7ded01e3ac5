import type { PendingRequest } from '../contracts/events.js';
import { contentDisplay, contentText } from '../contracts/content-text.js';
import type { Message } from '../contracts/message.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { LiveEvent } from '../streams/envelopes.js';
import type { WireRecord } from './wire.js';
import { approvalIdOf, replyMessageId, type UIChunk, type UIMessageMetadata, userMessageId } from './ui-protocol.js';

/** A run/end status after which the run goes on later (in this process or another): the reply stays open. */
const RESUMED_LATER = new Set(['detached', 'fenced']);
const FINISH: ReadonlyMap<string, 'stop' | 'error' | 'other'> = new Map([
  ['succeeded', 'stop'],
  ['failed', 'error'],
]);

/**
 * Which reply a stream carries:
 * - `input`: the reply to the user message of that input (a POST's stream): records before its
 *   `user/message` are skipped;
 * - `next`: the reply to the first user message met (a resume, started at that message's seq);
 * - `all`: every reply of the log in turn, never ending (the history: ui-messages.ts).
 */
export type ReplyTarget = { kind: 'input'; inputId: string } | { kind: 'next' } | { kind: 'all' };

export interface UIChunkMapperOptions {
  /** The log's last position when the stream started: a suspension before it is history, not the end. */
  knownLastSeq?: number;
  /** Put in the `start` chunk's metadata. */
  sessionId?: string;
  /** The run open where the stream starts (its run/start lies before the stream's first record). */
  run?: { runId: string; kind?: string };
  /** The input id of the stream's first user message when its run/start lies before the stream (a resume). */
  runInputId?: string;
}

export interface MappedRecord {
  chunks: UIChunk[];
  /** The user message that opened a reply (only with target `all`). */
  user?: { id: string; text: string; seq: number };
  /** The input id of a steer the reply showed (a user message inside its run). */
  steer?: string;
  /** Another message of the input that opened the reply (a prompt given as several messages; target `all`). */
  more?: string;
  /** The reply is over: the stream ends after these chunks. */
  end?: boolean;
}

/**
 * Maps one session's committed records and live events, in log order, to the UI message chunks
 * of one reply (or of every reply, for the history). Stateful, pure: no I/O.
 * A suspended run ends the reply only at the log's end as the stream found it (`knownLastSeq`):
 * replayed history whose run went on after an approval is not cut there.
 * @example
 * const m = new UIChunkMapper({ kind: 'next' }, { knownLastSeq: head.lastSeq })
 * for (const r of records) send(m.committed(r).chunks)
 */
export class UIChunkMapper {
  private open = false;
  private run: { runId: string; kind?: string; status: string; error?: string } | undefined;
  private liveText: string | undefined;
  private liveCount = 0;
  private lastText: string | undefined;
  private readonly toolNames = new Map<string, string>();
  private readonly callArgs = new Map<string, unknown>();
  private readonly denied = new Set<string>();
  private pending: PendingRequest | undefined;
  /** A step is open: its start-step was sent (by its step/start, or by live text that came first). */
  private inStep = false;
  /** The open step's start-step went out live: its step/start record is not mapped yet. */
  private liveStep = false;
  /** The input a run/start just read started its run with: the next user message's id. */
  private runInputId: string | undefined;
  /** The open run's first user message was mapped: a later one is a steer, shown in the run's reply. */
  private runMessageSeen = false;
  /** A step of the open run was mapped (its input's messages come before its first). */
  private stepSeen = false;
  private readonly knownLastSeq: number;
  private readonly sessionId: string | undefined;

  constructor(
    private readonly target: ReplyTarget,
    options: UIChunkMapperOptions = {},
  ) {
    this.knownLastSeq = options.knownLastSeq ?? 0;
    this.sessionId = options.sessionId;
    if (options.run) this.run = { ...options.run, status: 'running' };
    this.runInputId = options.runInputId;
  }

  committed(r: WireRecord): MappedRecord {
    const p = r.payload as Record<string, unknown>;
    if (p.copiedFrom !== undefined) return { chunks: [] }; // a compaction's copy: shown once already
    if (r.type === 'run/start') {
      const runId = String(p.runId);
      // another run's start belongs to the reply its user message opens
      const same = this.run === undefined || this.run.runId === runId;
      if (this.run?.runId !== runId) this.runMessageSeen = false;
      this.run = { runId, kind: String(p.kind), status: 'running' };
      this.runInputId = typeof p.inputId === 'string' ? p.inputId : undefined;
      this.inStep = false; // a new attempt starts its steps again
      return { chunks: this.open && same ? [this.runPart()] : [] };
    }
    if (r.type === 'user/message') return this.userMessage(r);
    if (r.type === 'input/cancelled' && this.target.kind === 'input' && p.inputId === this.target.inputId && !this.open)
      return { chunks: [{ type: 'start', messageId: replyMessageId(this.target.inputId) }, { type: 'finish' }], end: true };
    if (!this.open) return { chunks: [] };
    return { chunks: this.inReply(r, p), ...(this.endsReply(r, p) ? { end: true } : {}) };
  }

  /**
   * The message holds parts only live chunks made: a step started live (its step/start record not
   * mapped yet) or text still streaming. A resume position says so (`N:step`, ui-message-stream.ts).
   */
  get holdsLive(): boolean {
    return this.liveStep || this.liveText !== undefined;
  }

  /**
   * A resumed stream's client holds the live start-step of the step after the records mapped so
   * far (it was cut while that step streamed): the step's step/start record sends no second one.
   */
  continueLiveStep(): void {
    this.inStep = true;
    this.liveStep = true;
  }

  live(e: LiveEvent): UIChunk[] {
    if (!this.open) return [];
    switch (e.type) {
      case 'message_start':
        if (e.role !== 'assistant') return [];
        this.liveText = `live${++this.liveCount}`;
        // a step's live text comes before its step/start record (the step commits with its message)
        return [...this.startStep(true), { type: 'text-start', id: this.liveText }];
      case 'message_delta':
        return this.liveText && e.role === 'assistant' ? [{ type: 'text-delta', id: this.liveText, delta: e.text }] : [];
      case 'message_end': {
        // live only when discarded: the attempt failed, its text is never committed; the step's parts go
        if (!this.liveText) return [];
        const id = this.liveText;
        this.liveText = undefined;
        return [{ type: 'text-end', id }, { type: 'reset-step' }];
      }
      case 'tool_update':
        return [
          {
            type: 'data-actorloop-tool-progress',
            id: e.callId,
            data: { callId: e.callId, name: e.name, update: e.update },
            transient: true,
          },
        ];
      default:
        return [];
    }
  }

  private userMessage(r: WireRecord): MappedRecord {
    const id = userMessageId(r, this.runInputId);
    this.runInputId = undefined;
    // a user message's parts that are not text (stored as blob references) are shown by their summary
    const text = contentDisplay((r.payload.message as Message).content);
    const later = this.open && this.runMessageSeen;
    this.runMessageSeen = true;
    if (!later) this.stepSeen = false;
    // a steer (an input's message inside the run): the run goes on, and so does its reply
    if (later && typeof r.payload.inputId === 'string')
      return { chunks: [{ type: 'steering-message', id, parts: [{ type: 'text', text }] }], steer: id };
    // the run's own input given as several messages (before its first step): the user's message
    // goes on; a message a tool added to the run (additionalMessages) is the tool's, not shown
    if (later) return { chunks: [], ...(!this.stepSeen && this.target.kind === 'all' ? { more: text } : {}) };
    const t = this.target;
    if (this.open && t.kind !== 'all') return { chunks: this.finish(undefined), end: true }; // the next reply is another stream's
    if (t.kind === 'input' && id !== t.inputId) return { chunks: [] };
    const chunks: UIChunk[] = this.open ? this.finish(undefined) : [];
    this.open = true;
    const messageId = replyMessageId(id);
    this.lastText = undefined;
    this.liveText = undefined;
    this.inStep = false;
    this.liveStep = false;
    const metadata: UIMessageMetadata = { ...(this.sessionId !== undefined ? { sessionId: this.sessionId } : {}), fromSeq: r.seq };
    chunks.push({ type: 'start', messageId, messageMetadata: metadata });
    if (this.run) chunks.push(this.runPart());
    return { chunks, ...(t.kind === 'all' ? { user: { id, text, seq: r.seq } } : {}) };
  }

  private inReply(r: WireRecord, p: Record<string, unknown>): UIChunk[] {
    switch (r.type) {
      case 'session/attached':
        return this.run?.status === 'running' ? [{ type: 'data-actorloop-resumed', id: `resumed-${r.seq}`, data: { seq: r.seq } }] : [];
      case 'step/start':
        this.stepSeen = true;
        this.liveStep = false;
        return this.startStep();
      case 'step/end':
        this.inStep = false;
        return [{ type: 'finish-step' }];
      case 'assistant/message':
        return this.assistantMessage(r.seq, p.message as Message);
      case 'tool/call':
        return this.toolCall(String(p.callId), String(p.name), p.arguments);
      case 'tool/batch-rejected':
        return (p.issues as { callId: string; name: string; message: string }[]).map((i) => ({
          type: 'tool-input-error',
          toolCallId: i.callId,
          toolName: i.name,
          input: parsedArguments(this.callArgs.get(i.callId) ?? {}),
          errorText: i.message,
        }));
      case 'approval/requested': {
        const req = p.pendingRequest as PendingRequest;
        this.pending = req;
        if (req.kind !== 'approval') return [];
        return req.calls.flatMap((c) => [
          ...this.toolCall(c.callId, c.name, c.arguments),
          { type: 'tool-approval-request', approvalId: approvalIdOf(c.callId), toolCallId: c.callId } as const,
        ]);
      }
      case 'approval/decided': {
        this.pending = undefined;
        const out: UIChunk[] = [];
        for (const [callId, decision] of Object.entries(p.decisions as Record<string, string>)) {
          out.push({ type: 'tool-approval-response', approvalId: approvalIdOf(callId), approved: decision === 'approve' });
          if (decision === 'deny') {
            this.denied.add(callId);
            out.push({ type: 'tool-output-denied', toolCallId: callId });
          }
        }
        return out;
      }
      case 'tool/result':
        return this.toolResult(String(p.callId), String(p.name), p.outcome as ToolOutcome);
      case 'question/asked':
        this.pending = p.pendingRequest as PendingRequest;
        return [{ type: 'data-actorloop-question', id: this.pending.questionId, data: this.pending }];
      case 'verification/rejected':
        return [
          {
            type: 'data-actorloop-verification',
            id: `verification-${r.seq}`,
            data: { target: String(p.target), reason: String(p.reason), ...(typeof p.callId === 'string' ? { callId: p.callId } : {}) },
          },
        ];
      case 'final/message': {
        const content = String(p.content);
        const chunks: UIChunk[] = content !== this.lastText && content !== '' ? textChunks(`t${r.seq}`, content) : [];
        const id = String(p.finalMessageId ?? `final-${r.seq}`);
        chunks.push({ type: 'data-actorloop-final', id, data: { content, ...(p.output !== undefined ? { output: p.output } : {}) } });
        return chunks;
      }
      case 'run/end': {
        if (!this.run) return [];
        this.run.status = String(p.status);
        const error = (p.error as { message?: unknown } | undefined)?.message;
        if (typeof error === 'string') this.run.error = error;
        const chunks: UIChunk[] = [this.runPart()];
        if (!this.endsReply(r, p)) return chunks;
        const reason = this.finishReason(this.run.status);
        chunks.push(...this.finish(reason, reason === 'error' ? this.run.error : undefined));
        return chunks;
      }
      default: // the other records change nothing a chat shows (docs/web.md)
        return [];
    }
  }

  /** A run that settled, or a suspension at the log's end, ends the reply. */
  private endsReply(r: WireRecord, p: Record<string, unknown>): boolean {
    if (r.type !== 'run/end' || this.target.kind === 'all' || !this.run) return false;
    const status = String(p.status);
    if (RESUMED_LATER.has(status)) return false;
    if (status === 'suspended') return r.seq >= this.knownLastSeq;
    return true;
  }

  private finishReason(status: string): 'stop' | 'error' | 'other' | 'tool-calls' {
    if (status === 'suspended') return this.pending?.kind === 'approval' ? 'tool-calls' : 'other';
    return FINISH.get(status) ?? 'other';
  }

  /** Ends the reply; a failed run's `error` goes last before the finish (useChat reads nothing after it). */
  private finish(reason: 'stop' | 'error' | 'other' | 'tool-calls' | undefined, error?: string): UIChunk[] {
    const chunks: UIChunk[] = [];
    if (this.liveText) chunks.push({ type: 'text-end', id: this.liveText });
    this.liveText = undefined;
    if (error !== undefined) chunks.push({ type: 'error', errorText: error });
    chunks.push(reason ? { type: 'finish', finishReason: reason } : { type: 'finish' });
    return chunks;
  }

  private startStep(live = false): UIChunk[] {
    if (this.inStep) return [];
    this.inStep = true;
    this.liveStep = live;
    return [{ type: 'start-step' }];
  }

  private runPart(): UIChunk {
    const run = this.run!;
    return { type: 'data-actorloop-run', id: run.runId, data: { ...run } };
  }

  private assistantMessage(seq: number, m: Message): UIChunk[] {
    for (const c of m.toolCalls ?? []) this.callArgs.set(c.id, c.arguments);
    const chunks: UIChunk[] = [];
    const text = contentText(m.content);
    if (text) this.lastText = text;
    const thinking = reasoningOf(m);
    if (this.liveText) {
      chunks.push({ type: 'text-end', id: this.liveText }); // its deltas were this message
      this.liveText = undefined;
      if (thinking.length === 0) return chunks;
      // its reasoning was not streamed and goes first: the step (a message is its first part) comes again whole
      chunks.push({ type: 'reset-step' });
    }
    thinking.forEach((t, i) => chunks.push(...reasoningChunks(`r${seq}-${i}`, t)));
    if (text) chunks.push(...textChunks(`t${seq}`, text));
    return chunks;
  }

  private toolCall(callId: string, name: string, input: unknown): UIChunk[] {
    if (this.toolNames.has(callId)) return [];
    this.toolNames.set(callId, name);
    this.callArgs.set(callId, input);
    return [{ type: 'tool-input-available', toolCallId: callId, toolName: name, input }];
  }

  private toolResult(callId: string, name: string, o: ToolOutcome): UIChunk[] {
    if (this.denied.has(callId)) return [];
    const chunks = this.toolCall(callId, name, this.callArgs.get(callId) ?? {}); // unless announced already

    if (o.kind === 'completed' && !o.isError)
      chunks.push({ type: 'tool-output-available', toolCallId: callId, output: o.structured ?? o.content });
    else if (o.kind === 'uncertain-settled') chunks.push({ type: 'tool-output-available', toolCallId: callId, output: o.content });
    else chunks.push({ type: 'tool-output-error', toolCallId: callId, errorText: outcomeText(o) });
    return chunks;
  }
}

/** A call's arguments as the model sent them: a JSON text parsed, anything else as it is. */
function parsedArguments(args: unknown): unknown {
  if (typeof args !== 'string') return args;
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return args;
  }
}

function outcomeText(o: ToolOutcome): string {
  switch (o.kind) {
    case 'completed':
      return contentDisplay(o.content);
    case 'skipped':
      return `skipped: ${o.reason}`;
    case 'cancelled':
      return `cancelled${o.partialContent ? `: ${o.partialContent}` : ''}`;
    default:
      return `${o.kind}: ${o.content}`;
  }
}

const textChunks = (id: string, text: string): UIChunk[] => [
  { type: 'text-start', id },
  { type: 'text-delta', id, delta: text },
  { type: 'text-end', id },
];
const reasoningChunks = (id: string, text: string): UIChunk[] => [
  { type: 'reasoning-start', id },
  { type: 'reasoning-delta', id, delta: text },
  { type: 'reasoning-end', id },
];

/** The thinking of an assistant message (Anthropic's `thinking` blocks, kept in providerData). */
function reasoningOf(m: Message): string[] {
  const blocks = (m.providerData?.anthropic as { content?: unknown } | undefined)?.content;
  if (!Array.isArray(blocks)) return [];
  return blocks
    .filter((b): b is { type: 'thinking'; thinking: string } => (b as { type?: unknown })?.type === 'thinking')
    .map((b) => String(b.thinking ?? ''))
    .filter((t) => t !== '');
}
