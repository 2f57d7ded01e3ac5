import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { ModelMessage as Message } from '../../src/contracts/message.js';
import type { ModelStreamEvent } from '../../src/contracts/model.js';
import type { ToolSpec } from '../../src/contracts/tools.js';
import { openaiModel } from '../../src/providers/openai.js';

// Runs only with OPENAI_API_KEY set (OPENAI_BASE_URL and OPENAI_MODEL are honoured); costs a few cents.
const weather: ToolSpec = {
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
};

describe.skipIf(!process.env.OPENAI_API_KEY)('openaiModel against the live API', () => {
  const model = () => openaiModel({ client: new OpenAI(), model: process.env.OPENAI_MODEL ?? 'gpt-4.1-mini', temperature: 0 });
  const signal = () => AbortSignal.timeout(30_000);

  it('streams a text answer with usage', async () => {
    const events: ModelStreamEvent[] = [];
    const res = await model().call(
      {
        messages: [
          { role: 'system', content: 'Answer with one word.' },
          { role: 'user', content: 'What is the capital of France?' },
        ],
        tools: [],
        signal: signal(),
      },
      (e) => void events.push(e),
    );
    expect(res.finishReason).toBe('stop');
    expect(res.message.content).toMatch(/paris/i);
    expect(events.some((e) => e.type === 'text_delta')).toBe(true);
    expect(res.usage?.inputTokens).toBeGreaterThan(0);
  });

  it('calls a tool, then answers from its result', async () => {
    const messages: Message[] = [{ role: 'user', content: 'What is the weather in Paris? Use the tool.' }];
    const first = await model().call({ messages, tools: [weather], signal: signal() }, () => {});
    expect(first.finishReason).toBe('tool_calls');
    const call = first.message.toolCalls![0];
    expect(JSON.parse(call.arguments)).toEqual({ city: 'Paris' });
    messages.push(first.message, { role: 'tool', toolCallId: call.id, content: 'Sunny, 31 degrees Celsius.' });
    const second = await model().call({ messages, tools: [weather], signal: signal() }, () => {});
    expect(second.finishReason).toBe('stop');
    expect(second.message.content).toMatch(/31/);
  });

  it('maps a bad API key to a non-retryable ProviderError', async () => {
    const bad = openaiModel({ client: new OpenAI({ apiKey: 'sk-invalid' }), model: 'gpt-4.1-mini' });
    await expect(bad.call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: signal() }, () => {})).rejects.toMatchObject({
      name: 'ProviderError',
      retryable: false,
      status: 401,
    });
  });
});
