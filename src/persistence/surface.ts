import { hash } from 'node:crypto';
import type { EventRecord } from '../contracts/events.js';
import type { Message } from '../contracts/message.js';
import type { ToolOutcome } from '../contracts/tools.js';

/** The text a model reads for a tool outcome. */
export function outcomeText(o: ToolOutcome): string {
  switch (o.kind) {
    case 'completed':
      return o.isError ? `Error: ${o.content}` : o.content;
    case 'skipped':
      return `Skipped: ${o.reason}`;
    case 'cancelled':
      return `Cancelled${o.settled ? '' : ' (may still be running)'}${o.partialContent ? `: ${o.partialContent}` : ''}`;
    case 'uncertain-settled':
      return `Outcome uncertain (settled): ${sentence(o.content)}`;
    case 'uncertain-hanging':
      return `Outcome uncertain: ${sentence(o.content)}${o.resourceLocks.length > 0 ? ` The resource${o.resourceLocks.length > 1 ? 's' : ''} ${o.resourceLocks.join(', ')} stay${o.resourceLocks.length > 1 ? '' : 's'} locked until released.` : ''}`;
  }
}

/** `text` ending as a sentence does (a full stop added where it has none). */
function sentence(text: string): string {
  const t = text.trimEnd();
  return t === '' || /[.!?]$/.test(t) ? t : `${t}.`;
}

/** Model-visible messages of one surface event (DESIGN §2: the surface is the model's view). */
export function surfaceMessages(e: EventRecord): Message[] {
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
  let chars = m.content.length + 8;
  for (const c of m.toolCalls ?? []) chars += c.name.length + c.arguments.length + 8;
  return Math.ceil(chars / 4);
}

/**
 * The session's in-memory view of the surface: messages since the last epoch, a running token
 * estimate, and the chained request digest (DESIGN §4 item 2), all updated in O(new events).
 */
export class Surface {
  messages: Message[] = [];
  /** The surface events behind `messages`, in order (compaction keeps the current run's). */
  entries: EventRecord[] = [];
  tokens = 0;
  /** Seq of the last surface event applied. */
  lastSeq = 0;
  private digest = '';
  private digestCovered = 0;

  apply(records: readonly EventRecord[]): void {
    for (const r of records) {
      if (r.surfaceOp === 'none') continue;
      if (r.surfaceOp === 'epoch') {
        this.messages = [];
        this.entries = [];
        this.tokens = 0;
        this.digest = '';
        this.digestCovered = 0;
      }
      this.entries.push(r);
      for (const m of surfaceMessages(r)) {
        this.messages.push(m);
        this.tokens += estimateTokens(m);
      }
      this.lastSeq = r.seq;
    }
  }

  /**
   * Digest of the canonical request [prefix..., ...surface] with the tool catalog, chained one
   * message at a time (each link = sha256(previous link + the message's JSON), from the prefix
   * digest): O(messages added since the previous call), and the same for the same request in any
   * process — one that reopened the session and hashes the surface in one go included.
   */
  requestDigest(prefixDigest: string, toolCatalogDigest: string): string {
    let link = this.digest || prefixDigest;
    for (let i = this.digestCovered; i < this.messages.length; i++) link = sha256(link + JSON.stringify(this.messages[i]));
    this.digest = link;
    this.digestCovered = this.messages.length;
    return sha256(link + toolCatalogDigest);
  }
}

export const sha256 = (s: string): string => hash('sha256', s, 'hex');
