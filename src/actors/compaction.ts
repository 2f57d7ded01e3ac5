import { CapacityError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import type { EventRecord } from '../contracts/events.js';
import type { RunEnv } from './run-env.js';
import type { StepAt } from './model-step.js';
import { surfaceMessages } from './surface.js';

const line = (m: Message) =>
  `${m.role}${m.name ? ` (${m.name})` : ''}: ${m.content}${m.toolCalls?.length ? ` [tool calls: ${m.toolCalls.map((c) => `${c.name}(${c.arguments})`).join(', ')}]` : ''}`;

/**
 * Summarises the part of the surface older than the current run with the model (using
 * `compactionPrompt`) and commits a `compaction` event (surfaceOp `epoch`), followed by copies of
 * the current run's surface events so that the new surface is [summary, ...current run].
 * Nothing older to summarise → CapacityError (the current run alone does not fit).
 */
export async function compact(env: RunEnv, at: StepAt, runStartSeq: number, signal: AbortSignal): Promise<void> {
  const older: EventRecord[] = env.surface.entries.filter((e) => e.seq < runStartSeq);
  const kept: EventRecord[] = env.surface.entries.filter((e) => e.seq >= runStartSeq);
  const limit = env.config.contextWindow - env.config.outputReserve;
  if (older.length === 0 || (older.length === 1 && older[0]!.type === 'compaction')) {
    throw new CapacityError(env.prefixTokens + env.surface.tokens, limit);
  }
  const request: Message[] = [
    { role: 'system', content: env.config.compactionPrompt },
    { role: 'user', content: older.flatMap(surfaceMessages).map(line).join('\n') },
  ];
  const res = await env.model.call({ messages: request, tools: [], signal }, () => {});
  const summary: Message = { role: 'user', content: `Summary of the conversation so far:\n${res.message.content}` };
  env.writer.stage('compaction', at, { summary, replacedThroughSeq: older.at(-1)!.seq });
  // copies, marked: folds (locks, budgets) must not count them a second time
  for (const e of kept) env.writer.stage(e.type as 'user/message', { turn: e.turn, step: e.step, attempt: e.attempt }, { ...e.payload, copiedFrom: e.payload.copiedFrom ?? e.seq } as never);
  await env.writer.commit();
}

