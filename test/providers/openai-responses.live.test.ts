import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { ModelMessage as Message } from '../../src/contracts/message.js';
import type { ModelStreamEvent } from '../../src/contracts/model.js';
import type { ToolSpec } from '../../src/contracts/tools.js';
import { openaiResponsesModel } from '../../src/providers/openai-responses.js';

// Runs only with OPENAI_API_KEY set (OPENAI_BASE_URL and OPENAI_RESPONSES_MODEL, a reasoning model, are honoured); costs a few cents.
const weather: ToolSpec = {
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
};

describe.skipIf(!process.env.OPENAI_API_KEY)('openaiResponsesModel against the live API', () => {
  const model = () =>
    openaiResponsesModel({
      client: new OpenAI(),
      model: process.env.OPENAI_RESPONSES_MODEL ?? 'o4-mini',
      reasoning: { effort: 'low', summary: 'auto' },
    });
  const signal = () => AbortSignal.timeout(60_000);

  it('calls a tool with encrypted reasoning kept, then answers from its result with the reasoning item sent back', async () => {
    const messages: Message[] = [{ role: 'user', content: 'What is the weather in Paris? Use the tool.' }];
    const events: ModelStreamEvent[] = [];
    const first = await model().call({ messages, tools: [weather], signal: signal() }, (e) => void events.push(e));
    expect(first.finishReason).toBe('tool_calls');
    const call = first.message.toolCalls![0];
    expect(JSON.parse(call.arguments)).toEqual({ city: 'Paris' });
    const output = (first.message.providerData?.openaiResponses as { output: { type: string; encrypted_content?: string }[] }).output;
    expect(output.find((i) => i.type === 'reasoning')?.encrypted_content).toEqual(expect.any(String));
    expect(first.usage?.reasoningTokens).toBeGreaterThanOrEqual(0);
    messages.push(first.message, { role: 'tool', toolCallId: call.id, content: 'Sunny, 31 degrees Celsius.' });
    const second = await model().call({ messages, tools: [weather], signal: signal() }, () => {});
    expect(second.finishReason).toBe('stop');
    expect(second.message.content).toMatch(/31/);
  });

  it('maps a bad API key to a non-retryable ProviderError', async () => {
    const bad = openaiResponsesModel({ client: new OpenAI({ apiKey: 'sk-invalid' }), model: 'o4-mini' });
    await expect(bad.call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: signal() }, () => {})).rejects.toMatchObject({
      name: 'ProviderError',
      retryable: false,
      status: 401,
    });
  });
});
