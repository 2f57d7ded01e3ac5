// Type-checked with skipLibCheck: false in an app with only openai and zod (test/packaging/install.test.ts).
import OpenAI from 'openai';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, openaiModel, type Envelope, type ExecutionResult, type OpenAIClient } from 'actorloop';

const client: OpenAIClient = new OpenAI({ apiKey: 'sk-test' });
const echo = defineTool({
  name: 'echo',
  description: 'Echoes',
  parameters: z.object({ text: z.string() }),
  mode: 'parallel',
  execute: ({ text }) => text,
});
const runtime = createRuntime({ store: memoryStore(), model: openaiModel({ client, model: 'gpt-4.1-mini' }), tools: [echo] });
export async function ask(question: string): Promise<ExecutionResult> {
  const session = await runtime.openSession('ts-1');
  const seen: Envelope[] = [];
  session.subscribe((e) => void seen.push(e));
  return session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: question });
}

export async function stream(question: string): Promise<string> {
  const session = await runtime.openSession('ts-2');
  const run = session.run(question);
  let text = '';
  for await (const delta of run.textStream) text += delta;
  const result: ExecutionResult = await run.result;
  return `${text} (${result.status})`;
}
