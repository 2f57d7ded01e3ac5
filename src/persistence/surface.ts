import { createHash, hash } from 'node:crypto';
import type { EventRecord } from '../contracts/events.js';
import type { Message } from '../contracts/message.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { StoredContent } from '../contracts/content.js';

/** What a model reads for a tool outcome: text, or a completed outcome's parts (an error's first text part says so). */
export function outcomeText(o: ToolOutcome): StoredContent {
  switch (o.kind) {
    case 'completed':
      if (typeof o.content !== 'string') return o.isError ? [{ type: 'text', text: 'Error: ' }, ...o.content] : o.content;
      return o.isError ? `Error: ${o.content}` : o.content;
    case 'skipped':
      return `Skipped: ${o.reason}`;
    case 'cancelled':
      return `Cancelled${o.settled ? '' : ' (may still be running)'}${o.partialContent ? `: ${o.partialContent}` : ''}`;
    case 'uncertain-settled':
      return `Outcome uncertain (settled): ${sentence(o.content)}`;
    case 'uncertain-hanging': {
      const n = o.resourceLocks.length;
      const locks =
        n > 0 ? ` The resource${n > 1 ? 's' : ''} ${o.resourceLocks.join(', ')} stay${n > 1 ? '' : 's'} locked until released.` : '';
      return `Outcome uncertain: ${sentence(o.content)}${locks}`;
    }
  }
}

/** `text` ending as a sentence does (a full stop added where it has none). */
function sentence(text: string): string {
  const t = text.trimEnd();
  return t === '' || /[.!?]$/.test(t) ? t : `${t}.`;
}

/** Model-visible messages of one surface event (DESIGN §2: the surface is the model's view). */
export function surfaceMessages(e: Pick<EventRecord, 'type' | 'payload'>): Message[] {
  const p = e.payload as Record<string, any>;
  switch (e.type) {
    case 'user/message':
    case 'assistant/message':
      return [p.message as Message];
    case 'tool/result': {
      const o = p.outcome as ToolOutcome;
      const isError = o.kind === 'completed' ? o.isError : o.kind !== 'uncertain-settled';
      return [{ role: 'tool', toolCallId: p.callId, name: p.name, content: outcomeText(o), ...(isError ? { isError } : {}) }];
    }
    case 'tool/batch-rejected':
      return (p.issues as { callId: string; name: string; message: string }[]).map((i) => ({
        role: 'tool' as const,
        toolCallId: i.callId,
        name: i.name,
        content: `Error: this tool call was rejected and did not run: ${i.message}`,
        isError: true,
      }));
    case 'verification/rejected':
      return [p.message as Message];
    case 'compaction':
      return [p.summary as Message];
    case 'checkpoint/loaded':
      return p.messages as Message[];
    default:
      return [];
  }
}

/** Rough token estimate (4 characters a token), kept as a running sum. */
export function estimateTokens(m: Message): number {
  let chars = (typeof m.content === 'string' ? m.content.length : partsChars(m.content)) + 8;
  for (const c of m.toolCalls ?? []) chars += c.name.length + c.arguments.length + 8;
  return Math.ceil(chars / 4);
}

/**
 * Parts in estimated characters (4 a token): text as it is; an image as 1,600 tokens (the most a
 * provider's scaling leaves of one), an image URL likewise; a file as a token per 32 bytes (a PDF's
 * pages become text and images). A rough figure for the context limit, like the rest.
 */
function partsChars(parts: Exclude<Message['content'], string>): number {
  let chars = 0;
  for (const p of parts) chars += p.type === 'text' ? p.text.length : p.type === 'image' ? 6400 : Math.ceil(p.blob.size / 8);
  return chars;
}

/**
 * A stored surface chunk (surface-chunks.ts): the messages of the surface events in seqs
 * `fromSeq..toSeq`, kept as the JSON text they were written as.
 */
export interface SurfaceChunk {
  fromSeq: number;
  toSeq: number;
  /** The surface epoch the chunk belongs to (the head's surfaceStartSeq) and the type of the event that began it, if one did. */
  epochSeq: number;
  epochType: string | null;
  /** Seq of the last surface event in the chunk (0: none). */
  lastSurfaceSeq: number;
  /** The seq of the surface event each message comes from. */
  seqs: number[];
  messages: Message[];
  /** `messages` as a JSON array, exactly as stored: `[` + each message's JSON joined by `,` + `]`. */
  messagesText: string;
}

/** What opening a session reads of its surface: stored chunks (oldest first), then the surface events after them. */
export interface StoredSurface {
  chunks: SurfaceChunk[];
  records: EventRecord[];
}

/**
 * The session's in-memory view of the surface: the messages since the last epoch (and the seq of
 * the event each comes from), a running token estimate, and the request digest (DESIGN §4 item
 * 2), all updated in O(new events). It keeps messages, not the events behind them: compaction
 * reads the current run's events back from the log when it needs them.
 */
export class Surface {
  messages: Message[] = [];
  /** The seq of the surface event each message comes from, parallel to `messages`. */
  seqs: number[] = [];
  /** Where the surface begins (the head's surfaceStartSeq) and the type of the epoch event there, if any. */
  epochSeq = 1;
  epochType: string | null = null;
  tokens = 0;
  /** Seq of the last surface event applied. */
  lastSeq = 0;
  /** SHA-256 over each hashed message's JSON followed by `,`. */
  private hash = createHash('sha256');
  private hashed = 0;

  apply(records: readonly EventRecord[]): void {
    for (const r of records) {
      if (r.surfaceOp === 'none') continue;
      if (r.surfaceOp === 'epoch') this.reset(r.seq, r.type);
      for (const m of surfaceMessages(r)) {
        this.messages.push(m);
        this.seqs.push(r.seq);
        this.tokens += estimateTokens(m);
      }
      this.lastSeq = r.seq;
    }
  }

  /** Replaces the surface with a stored one (what opening a session reads). */
  load(stored: StoredSurface): void {
    this.reset(1, null);
    const first = stored.chunks[0];
    if (first) {
      this.epochSeq = first.epochSeq;
      this.epochType = first.epochType;
    }
    for (const c of stored.chunks) {
      for (const m of c.messages) {
        this.messages.push(m);
        this.tokens += estimateTokens(m);
      }
      for (const seq of c.seqs) this.seqs.push(seq);
      // the chunk's text is its messages' JSON joined by commas: hashed as stored, not re-encoded
      if (c.messages.length > 0) this.hash.update(c.messagesText.slice(1, -1)).update(',');
      this.hashed = this.messages.length;
      if (c.lastSurfaceSeq > 0) this.lastSeq = c.lastSurfaceSeq;
    }
    this.apply(stored.records);
  }

  private reset(epochSeq: number, epochType: string | null): void {
    this.messages = [];
    this.seqs = [];
    this.epochSeq = epochSeq;
    this.epochType = epochType;
    this.tokens = 0;
    this.hash = createHash('sha256');
    this.hashed = 0;
  }

  /**
   * Digest of the canonical request [prefix..., ...surface] with the tool catalog:
   * `sha256(prefix digest + surface digest + tool catalog digest)`, where the surface digest is a
   * running SHA-256 over each message's JSON followed by `,`. O(messages added since the previous
   * call), and the same for the same request in any process — one that reopened the session and
   * hashed its surface in one go included. `pending`: messages after the surface's own (a commit
   * under way), hashed into a copy.
   */
  requestDigest(prefixDigest: string, toolCatalogDigest: string, pending: readonly Message[] = []): string {
    for (; this.hashed < this.messages.length; this.hashed++) this.hash.update(JSON.stringify(this.messages[this.hashed])).update(',');
    const h = this.hash.copy();
    // messages of a commit still landing (LogWriter.pendingMessages): hashed as apply() will add them
    for (const m of pending) h.update(JSON.stringify(m)).update(',');
    return sha256(prefixDigest + h.digest('hex') + toolCatalogDigest);
  }
}

export const sha256 = (s: string): string => hash('sha256', s, 'hex');
