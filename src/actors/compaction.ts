import type { Message } from '../contracts/message.js';
import type { RunEnv } from './run-env.js';
import type { StepAt } from './model-step.js';

/**
 * Summarises the surface with the model using `compactionPrompt` and commits a `compaction`
 * event (surfaceOp `epoch`): the new surface starts with the summary.
 */
export async function compact(env: RunEnv, at: StepAt, signal: AbortSignal): Promise<void> {
  const older = env.surface.messages;
  if (older.length === 0) return;
  const transcript = older
    .map((m) => `${m.role}${m.name ? ` (${m.name})` : ''}: ${m.content}${m.toolCalls?.length ? ` [tool calls: ${m.toolCalls.map((c) => `${c.name}(${c.arguments})`).join(', ')}]` : ''}`)
    .join('\n');
  const request: Message[] = [
    { role: 'system', content: env.config.compactionPrompt },
    { role: 'user', content: transcript },
  ];
  const res = await env.model.call({ messages: request, tools: [], signal }, () => {});
  const summary: Message = { role: 'user', content: `Summary of the conversation so far:\n${res.message.content}` };
  env.writer.stage('compaction', at, { summary, replacedThroughSeq: env.surface.lastSeq });
  await env.writer.commit();
}
