import type { EventRecord } from '../../src/contracts/events.js';
import type { Message, ModelMessage } from '../../src/contracts/message.js';

/** Tool call ids in the log with neither a tool/result nor a batch rejection. */
export function unansweredInLog(log: EventRecord[]): string[] {
  const answered = new Set<string>();
  for (const e of log) {
    if (e.type === 'tool/result') answered.add(e.payload.callId as string);
    if (e.type === 'tool/batch-rejected') for (const i of e.payload.issues as { callId: string }[]) answered.add(i.callId);
  }
  const asked = log
    .filter((e) => e.type === 'assistant/message')
    .flatMap((e) => ((e.payload.message as Message).toolCalls ?? []).map((c) => c.id));
  return asked.filter((id) => !answered.has(id));
}

/** Tool call ids of assistant messages in a model request that have no tool message answering them. */
export function unansweredInRequest(messages: readonly ModelMessage[]): string[] {
  const answered = new Set(messages.filter((m) => m.role === 'tool').map((m) => m.toolCallId));
  return messages.flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []).map((c) => c.id) : [])).filter((id) => !answered.has(id));
}
