import { contentDisplay } from '../contracts/content.js';
import type { EventRecord } from '../contracts/events.js';
import type { ToolOutcome } from '../contracts/tools.js';

/** Cuts `s` to one line of at most `max` characters. */
export function clip(s: string, max = 100): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

const json = (v: unknown, max = 80) => clip(typeof v === 'string' ? v : (JSON.stringify(v) ?? ''), max);

/** A tool outcome in a few words: `completed: 42`, `uncertain-hanging (locks env:staging)`. */
export function outcomeSummary(o: ToolOutcome, max = 80): string {
  switch (o.kind) {
    case 'completed':
      return `${o.isError ? 'error' : 'completed'}: ${clip(contentDisplay(o.content), max)}`;
    case 'skipped':
      return `skipped: ${clip(o.reason, max)}`;
    case 'cancelled':
      return `cancelled${o.settled ? '' : ' (unsettled)'}${o.partialContent ? `: ${clip(o.partialContent, max)}` : ''}`;
    case 'uncertain-settled':
      return `uncertain-settled: ${clip(o.content, max)}`;
    case 'uncertain-hanging':
      return `uncertain-hanging (locks ${o.resourceLocks.join(', ') || 'none'}): ${clip(o.content, max)}`;
  }
}

/** What one event says, in a few words (for `log`, `tail` and the timeline's tooltips). */
export function summarize(e: EventRecord): string {
  const copied = (e.payload as { copiedFrom?: unknown }).copiedFrom;
  return copied === undefined ? describeEvent(e) : `${describeEvent(e)} (copy of seq ${String(copied)}, kept by a compaction)`;
}

function describeEvent(e: EventRecord): string {
  const p = e.payload as Record<string, any>;
  switch (e.type) {
    case 'session/attached':
      return `writer epoch ${p.writerEpoch} (instance ${String(p.sessionInstanceId).slice(0, 8)})`;
    case 'run/start':
      return `run ${p.runId} ${p.kind} (attempt ${p.attemptId}, run epoch ${p.runEpoch})`;
    case 'run/end':
      return `run ${p.runId} ${p.status} → ${p.outcome}${p.error?.message ? `: ${clip(p.error.message, 60)}` : ''}`;
    case 'user/message':
      return `user: ${clip(contentDisplay(p.message?.content ?? ''))}`;
    case 'assistant/message': {
      const calls = (p.message?.toolCalls ?? []) as { name: string }[];
      const text = p.message?.content ? clip(p.message.content, 70) : '';
      const tools = calls.length ? `calls ${calls.map((c) => c.name).join(', ')}` : '';
      const cost =
        p.cost !== undefined
          ? `, cost ${p.cost}`
          : p.counted === 'reservation'
            ? `, no usage reported: counted at its reservation${p.reserved?.cost !== undefined ? ` ${p.reserved.cost}` : ''}`
            : '';
      return `assistant (${p.finishReason}, ${Math.round(p.latencyMs ?? 0)} ms${cost}): ${[text, tools].filter(Boolean).join(' — ')}`;
    }
    case 'assistant/attempt':
      return (
        `model attempt ${p.attemptNumber} failed (${p.error?.retryable ? 'retryable' : 'final'}` +
        `${p.counted === 'reservation' && p.reserved?.cost !== undefined ? `, counted at its reservation ${p.reserved.cost}` : ''}): ` +
        clip(p.error?.message ?? '', 60)
      );
    case 'tool/call':
      return `${p.name} ${p.callId} [${p.mode}] ${json(p.arguments, 70)}`;
    case 'tool/result':
      return (
        `${p.name} ${p.callId} ${outcomeSummary(p.outcome as ToolOutcome, 60)}` +
        (p.startedAt && p.endedAt ? ` (${p.endedAt - p.startedAt} ms)` : '')
      );
    case 'tool/batch-rejected':
      return `batch rejected: ${(p.issues as { name: string; message: string }[]).map((i) => `${i.name}: ${i.message}`).join('; ')}`;
    case 'run/suspended':
      return `suspended: ${p.pendingRequest?.kind} ${p.pendingRequest?.questionId}`;
    case 'approval/requested':
    case 'question/asked':
      return (
        `${p.pendingRequest?.kind} ${p.pendingRequest?.questionId}` +
        (p.pendingRequest?.question ? `: ${clip(p.pendingRequest.question, 60)}` : '') +
        // a child's request: the session that asked
        (Array.isArray(p.pendingRequest?.path) ? ` (asked by ${p.pendingRequest.path.at(-1)})` : '')
      );
    case 'approval/decided':
      return `${p.questionId}: ${json(p.decisions, 60)}${p.timedOut ? ' (timed out)' : ''}`;
    case 'approval/call-decided':
      return `${p.questionId}: ${p.decision} ${p.callId}`;
    case 'final/message':
      return `final ${p.finalMessageId}: ${clip(p.content ?? '', 70)}`;
    case 'delivery/committed':
      return `delivered ${p.finalMessageId}`;
    case 'delivery/unknown':
      return `delivery unknown ${p.finalMessageId}: ${p.reason}`;
    case 'compaction':
      return `compacted through seq ${p.replacedThroughSeq}: ${clip(p.summary?.content ?? '', 60)}`;
    case 'input/accepted':
      return `input ${p.inputId} (${p.mode})`;
    case 'cancellation/requested':
      return `cancel requested: ${p.reason}`;
    case 'verification/rejected':
      return `${p.target} rejected: ${clip(p.reason ?? '', 60)}`;
    case 'step/end':
      return p.usage ? `usage ${p.usage.inputTokens} in / ${p.usage.outputTokens} out` : '';
    default: {
      const s = JSON.stringify(p);
      return s === '{}' ? '' : json(p);
    }
  }
}

/** One `log` line: seq, time, turn/step/attempt, type, summary. */
export function formatLine(e: EventRecord): string {
  const time = e.occurredAt.slice(11, 23);
  const where = e.turn || e.step || e.attempt ? `t${e.turn} s${e.step} a${e.attempt}` : '';
  return `${String(e.seq).padStart(5)}  ${time}  ${where.padEnd(11)} ${e.type.padEnd(22)} ${summarize(e)}`.trimEnd();
}
