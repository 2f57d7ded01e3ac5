import type { EventRecord, PendingRequest } from '../contracts/events.js';
import type { Message, Usage } from '../contracts/message.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { LiveEvent } from './envelopes.js';

/**
 * The envelopes of one committed append, in log order, each with its record's seq (DESIGN §6):
 * a subscriber hears of a run's start, a steer's or follow-up's input, the model's whole message,
 * a tool's result, a step's end and a pending request only once it is durable, never before.
 * Copies a compaction makes (`copiedFrom`) announce nothing again.
 */
export function committedEnvelopes(records: readonly EventRecord[], sessionInstanceId: string): { event: LiveEvent; logSeq: number }[] {
  const out: { event: LiveEvent; logSeq: number }[] = [];
  const inputs = new Set<string>();
  for (const r of records) {
    const p = r.payload;
    if (p.copiedFrom !== undefined) continue;
    switch (r.type) {
      case 'run/start':
        out.push({
          event: {
            type: 'run_start',
            sessionInstanceId,
            runId: p.runId as string,
            attemptId: p.attemptId as string,
            runEpoch: p.runEpoch as number,
            turn: r.turn,
          },
          logSeq: r.seq,
        });
        if (typeof p.inputId === 'string')
          out.push({ event: { type: 'input_committed', inputId: p.inputId, durability: 'durable' }, logSeq: r.seq });
        break;
      case 'user/message':
        // a steer: one envelope per input, at its first message
        if (typeof p.inputId === 'string' && !inputs.has(p.inputId)) {
          inputs.add(p.inputId);
          out.push({ event: { type: 'input_committed', inputId: p.inputId, durability: 'durable' }, logSeq: r.seq });
        }
        break;
      case 'assistant/message':
        out.push({ event: { type: 'message_end', role: 'assistant', message: p.message as Message }, logSeq: r.seq });
        break;
      case 'tool/result': {
        const q = p as { callId: string; name: string; outcome: ToolOutcome; startedAt?: number; endedAt?: number };
        out.push({
          event: {
            type: 'tool_end',
            callId: q.callId,
            name: q.name,
            outcome: q.outcome,
            ...(q.startedAt !== undefined ? { startedAt: q.startedAt } : {}),
            ...(q.endedAt !== undefined ? { endedAt: q.endedAt } : {}),
          },
          logSeq: r.seq,
        });
        break;
      }
      case 'step/end':
        out.push({ event: { type: 'step_end', step: r.step, ...(p.usage ? { usage: p.usage as Usage } : {}) }, logSeq: r.seq });
        break;
      case 'approval/requested':
        out.push({ event: { type: 'approval_requested', pendingRequest: p.pendingRequest as PendingRequest }, logSeq: r.seq });
        break;
      case 'question/asked':
        out.push({ event: { type: 'question_asked', pendingRequest: p.pendingRequest as PendingRequest }, logSeq: r.seq });
        break;
      // no envelope of their own
      case 'approval/call-decided':
      case 'approval/decided':
      case 'assistant/attempt':
      case 'cancellation/requested':
      case 'checkpoint/loaded':
      case 'compaction':
      case 'delivery/committed':
      case 'delivery/unknown':
      case 'final/message':
      case 'input/accepted':
      case 'input/cancelled':
      case 'resources/released':
      case 'agent/handoff':
      case 'run/end':
      case 'run/suspended':
      case 'session/attached':
      case 'state/updated':
      case 'steering/accepted':
      case 'step/start':
      case 'tool/batch-rejected':
      case 'tool/call':
      case 'verification/rejected':
        break;
    }
  }
  return out;
}
