import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import type { ModelMessage as Message } from '../../src/contracts/message.js';
import type { ModelStreamEvent } from '../../src/contracts/model.js';
import type { ToolSpec } from '../../src/contracts/tools.js';
import { anthropicModel } from '../../src/providers/anthropic.js';

// Runs only with ANTHROPIC_API_KEY set (ANTHROPIC_BASE_URL and ANTHROPIC_MODEL are honoured); costs a few cents.
const weather: ToolSpec = {
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

describe.skipIf(!process.env.ANTHROPIC_API_KEY)('anthropicModel against the live API', () => {
  const id = process.env.ANTHROPIC_MODEL ?? 'claude-haiku-4-5';
  const signal = () => AbortSignal.timeout(60_000);

  it('streams a text answer with usage', async () => {
    const events: ModelStreamEvent[] = [];
    const model = anthropicModel({ client: new Anthropic(), model: id, maxTokens: 256 });
    const res = await model.call(
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

  it('round-trips a signed thinking block through a tool call', async () => {
    const model = anthropicModel({
      client: new Anthropic(),
      model: id,
      maxTokens: 4096,
      thinking: { type: 'enabled', budget_tokens: 1024 },
    });
    const messages: Message[] = [{ role: 'user', content: 'What is the weather in Paris? Use the tool.' }];
    const first = await model.call({ messages, tools: [weather], signal: signal() }, () => {});
    expect(first.finishReason).toBe('tool_calls');
    const content = (first.message.providerData?.anthropic as { content?: { type: string }[] }).content ?? [];
    expect(content[0]?.type).toMatch(/thinking/);
    const call = first.message.toolCalls![0];
    expect(JSON.parse(call.arguments)).toMatchObject({ city: expect.stringMatching(/paris/i) });
    // The API rejects a replayed thinking block whose signature does not match: success proves the round trip.
    messages.push(first.message, { role: 'tool', toolCallId: call.id, content: 'Sunny, 31 degrees Celsius.' });
    const second = await model.call({ messages, tools: [weather], signal: signal() }, () => {});
    expect(second.finishReason).toBe('stop');
    expect(second.message.content).toMatch(/31/);
  });

  it('maps a bad API key to a non-retryable ProviderError', async () => {
    const bad = anthropicModel({ client: new Anthropic({ apiKey: 'sk-ant-invalid' }), model: id });
    await expect(bad.call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: signal() }, () => {})).rejects.toMatchObject({
      name: 'ProviderError',
      retryable: false,
      status: 401,
    });
  });
});
