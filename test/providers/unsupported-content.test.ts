import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, isValidationError } from '../../src/index.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { anthropicModel } from '../../src/providers/anthropic.js';
import { openaiModel } from '../../src/providers/openai.js';
import { lmdbRuntime } from '../helpers/runtime.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { oa, startOpenAIServer } from './openai-server.js';
import type { ScriptedServer } from './sse-server.js';

/**
 * A part the session's model cannot take (docs/providers.md, "Content parts") never enters the
 * session's history: a prompt or input with one is refused before it is logged, a tool result with
 * one becomes an error result the model reads. Either way the next call of the session goes out.
 * Real LMDB, the real SDK clients against local servers.
 */
let openai: ScriptedServer;
let anthropic: ScriptedServer;
beforeAll(async () => {
  [openai, anthropic] = await Promise.all([startOpenAIServer(), startAnthropicServer()]);
});
afterAll(async () => {
  await Promise.all([openai.close(), anthropic.close()]);
});
beforeEach(() => {
  openai.reset();
  anthropic.reset();
});

const BMP = Buffer.concat([Buffer.from('424d', 'hex'), Buffer.alloc(200, 3)]);
const withBmp = {
  role: 'user' as const,
  content: [
    { type: 'text' as const, text: 'What is this?' },
    { type: 'image' as const, data: new Uint8Array(BMP), mediaType: 'image/bmp' },
  ],
};
const openaiOf = () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'gpt-test' });

async function typesOf(store: EventStore, sessionId: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of store.readEvents(sessionId)) out.push(e.type);
  return out;
}

describe('a prompt or input with a part the model cannot take', () => {
  it('is refused with a ValidationError naming the part and its media type before anything is logged; the next prompt runs', async () => {
    const { runtime, store } = lmdbRuntime({ model: openaiOf() });
    const s = await runtime.openSession('s');
    const before = await typesOf(store, 's');
    // thrown by session.run itself (synchronously); execute rejects with the same issues
    const refused = thrownBy(() => s.run(withBmp));
    expect(await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: withBmp }).catch((e: unknown) => e)).toMatchObject({
      issues: [{ path: [0, 'content', 1] }],
    });
    expect(isValidationError(refused)).toBe(true);
    expect(isValidationError(refused) && refused.issues).toEqual([
      { path: [0, 'content', 1], message: expect.stringContaining('does not take an image of media type image/bmp') },
    ]);
    const input = await s.submitInput({ inputId: 'i1', mode: 'follow_up', message: withBmp }).catch((e: unknown) => e);
    expect(isValidationError(input) && input.message).toContain('session.submitInput: message');
    expect(await typesOf(store, 's')).toEqual(before);
    expect(openai.requests).toHaveLength(0);

    openai.reply(oa.textReply(['Hello.']));
    const next = await s.run('Hi').result;
    expect(next).toMatchObject({ status: 'succeeded', finalMessage: 'Hello.' });
    expect(openai.requests).toHaveLength(1);
  });
});

describe('a tool result with a part the model cannot take', () => {
  const snap = defineTool({
    name: 'snap',
    description: 'Takes a screenshot',
    parameters: z.object({}),
    execute: () => ({
      kind: 'completed' as const,
      content: [
        { type: 'text' as const, text: 'the screen' },
        { type: 'image' as const, data: BMP, mediaType: 'image/bmp' },
      ],
    }),
  });

  it('becomes an error result the model reads; the run goes on and the session stays usable', async () => {
    const model = anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }), model: 'claude-test' });
    const { runtime } = lmdbRuntime({ model, tools: [snap] });
    anthropic.reply(
      an.stream([
        an.start(),
        an.toolStart(0, 'toolu_1', 'snap'),
        an.json(0, '{}'),
        an.blockStop(0),
        an.messageDelta('tool_use'),
        an.stop(),
      ]),
      an.textReply(['I could not see it.']),
      an.textReply(['Hello.']),
    );
    const s = await runtime.openSession('s');
    expect(await s.run('Take a screenshot').result).toMatchObject({ status: 'succeeded', finalMessage: 'I could not see it.' });
    const second = anthropic.requests[1]!.body as { messages: { role: string; content: Record<string, unknown>[] }[] };
    expect(second.messages.at(-1)!.content).toEqual([
      {
        type: 'tool_result',
        tool_use_id: 'toolu_1',
        is_error: true,
        content: expect.stringContaining(
          'tool snap returned content the model cannot take: the model claude-test does not take an image of media type image/bmp',
        ),
      },
    ]);
    expect(JSON.stringify(second)).not.toContain('image/bmp;');
    expect(await s.run('Hi').result).toMatchObject({ status: 'succeeded', finalMessage: 'Hello.' });
    expect(anthropic.requests).toHaveLength(3);
  });
});

/** What `fn` throws (undefined when it returns). */
function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return undefined;
}
