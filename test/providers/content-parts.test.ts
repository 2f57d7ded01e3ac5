import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  isProviderError,
  isValidationError,
  lmdbStore,
  memoryStore,
  type ModelProvider,
} from '../../src/index.js';
import type { ContentPart } from '../../src/contracts/content.js';
import type { ModelMessage } from '../../src/contracts/message.js';
import { anthropicModel } from '../../src/providers/anthropic.js';
import { openaiModel } from '../../src/providers/openai.js';
import { openaiResponsesModel } from '../../src/providers/openai-responses.js';
import { tempDir } from '../helpers/tmp.js';
import { an, startAnthropicServer } from './anthropic-server.js';
import { oa, startOpenAIServer } from './openai-server.js';
import { rs, startResponsesServer } from './responses-server.js';
import type { ScriptedServer } from './sse-server.js';

/**
 * Content parts on the wire (docs/providers.md, "Content parts"): the real SDKs against local
 * servers speaking each provider's format, in full runs — a user message's image (bytes and URL)
 * and PDF, a tool result's image, the same bytes again after the store is reopened, and a part a
 * provider cannot take refused before any request.
 */
let openai: ScriptedServer;
let anthropic: ScriptedServer;
let responses: ScriptedServer;
beforeAll(async () => {
  [openai, anthropic, responses] = await Promise.all([startOpenAIServer(), startAnthropicServer(), startResponsesServer()]);
});
afterAll(async () => {
  await Promise.all([openai.close(), anthropic.close(), responses.close()]);
});
beforeEach(() => {
  openai.reset();
  anthropic.reset();
  responses.reset();
});

const PNG = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), Buffer.alloc(600, 7)]);
const CHART = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), Buffer.alloc(300, 9)]);
const PDF = Buffer.from('%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n');
const b64 = (b: Buffer) => b.toString('base64');

const prompt = {
  role: 'user' as const,
  content: [
    { type: 'text' as const, text: 'What is in these?' },
    { type: 'image' as const, data: new Uint8Array(PNG), mediaType: 'image/png' },
    { type: 'image' as const, url: 'https://example.com/cat.jpg' },
    { type: 'file' as const, data: b64(PDF), mediaType: 'application/pdf', filename: 'report.pdf' },
  ],
};

/** A tool that answers with text and an image (bytes). */
const chart = defineTool({
  name: 'chart',
  description: 'Draws a chart',
  parameters: z.object({}),
  execute: () => ({
    kind: 'completed' as const,
    content: [
      { type: 'text' as const, text: 'the chart' },
      { type: 'image' as const, data: CHART, mediaType: 'image/png' },
    ],
  }),
});

const openaiOf = () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'gpt-test' });
const anthropicOf = () =>
  anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }), model: 'claude-test', maxTokens: 1024 });

const openaiToolCall = () =>
  oa.stream([oa.role(), oa.tool(0, '', { id: 'call_1', name: 'chart' }), oa.tool(0, '{}'), oa.finish('tool_calls'), oa.usage(10, 5)]);
const anthropicToolCall = () =>
  an.stream([an.start(), an.toolStart(0, 'toolu_1', 'chart'), an.json(0, '{}'), an.blockStop(0), an.messageDelta('tool_use'), an.stop()]);
const anthropicText = (text: string) =>
  an.stream([an.start(), an.textStart(0), an.text(0, text), an.blockStop(0), an.messageDelta('end_turn'), an.stop()]);

type Body = { messages: Record<string, unknown>[] };

describe('content parts on the OpenAI Chat Completions wire', () => {
  it("a user message's parts go as text, image_url (a data URL for bytes) and file parts; a tool result's image follows the tool message in a user message", async () => {
    openai.reply(openaiToolCall(), oa.textReply(['A cat, a report and a chart.']));
    const runtime = createRuntime({ store: memoryStore(), model: openaiOf(), tools: [chart] });
    try {
      const session = await runtime.openSession('s');
      const result = await session.run(prompt).result;
      expect(result.status).toBe('succeeded');
    } finally {
      await runtime.close();
    }
    const [first, second] = openai.requests.map((r) => r.body as Body);
    expect(first!.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in these?' },
          { type: 'image_url', image_url: { url: `data:image/png;base64,${b64(PNG)}` } },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
          { type: 'file', file: { file_data: `data:application/pdf;base64,${b64(PDF)}`, filename: 'report.pdf' } },
        ],
      },
    ]);
    expect(second!.messages.slice(1)).toEqual([
      expect.objectContaining({ role: 'assistant', tool_calls: [expect.objectContaining({ id: 'call_1' })] }),
      { role: 'tool', tool_call_id: 'call_1', content: 'the chart\n[1 attachment of this result follow in the next user message]' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Attachments of the tool result call_1 (chart):' },
          { type: 'image_url', image_url: { url: `data:image/png;base64,${b64(CHART)}` } },
        ],
      },
    ]);
  });

  it('after the LMDB store is reopened, the next run of the session sends the same image bytes again', async () => {
    const dir = tempDir();
    try {
      openai.reply(oa.textReply(['A cat.']));
      const one = createRuntime({ store: lmdbStore({ path: dir.path }), model: openaiOf() });
      await (await one.openSession('s')).run(prompt).result;
      await one.close();
      openai.reply(oa.textReply(['Still a cat.']));
      const two = createRuntime({ store: lmdbStore({ path: dir.path }), model: openaiOf() });
      try {
        const result = await (await two.openSession('s')).run('And now?').result;
        expect(result.status).toBe('succeeded');
      } finally {
        await two.close();
      }
      const [first, again] = openai.requests.map((r) => r.body as Body);
      expect(again!.messages[0]).toEqual(first!.messages[0]);
      expect(JSON.stringify(again!.messages[0])).toContain(b64(PNG));
    } finally {
      await dir.cleanup();
    }
  });

  it('an image of a media type the API does not take is refused before any request: the adapter with unsupported_content, a prompt with a ValidationError', async () => {
    const tiff = { role: 'user' as const, content: [{ type: 'image' as const, data: b64(PNG), mediaType: 'image/tiff' }] };
    const refused = await openaiOf()
      .call({ messages: [tiff], tools: [], signal: new AbortController().signal }, () => {})
      .catch((e: unknown) => e);
    expect(refused).toMatchObject({ name: 'ProviderError', providerCode: 'unsupported_content', retryable: false });
    expect((refused as Error).message).toContain('openai: an image of media type image/tiff is not supported');
    const runtime = createRuntime({ store: memoryStore(), model: openaiOf() });
    try {
      const session = await runtime.openSession('s');
      const prompt = await session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: [tiff] }).catch((e: unknown) => e);
      expect(isValidationError(prompt) && prompt.message).toContain('does not take an image of media type image/tiff');
    } finally {
      await runtime.close();
    }
    expect(openai.requests).toHaveLength(0);
  });
});

describe('content parts on the Anthropic Messages wire', () => {
  it("a user message's parts go as text, image (base64 and url sources) and document blocks; a tool result's image goes inside its tool_result", async () => {
    anthropic.reply(anthropicToolCall(), anthropicText('A cat, a report and a chart.'));
    const runtime = createRuntime({ store: memoryStore(), model: anthropicOf(), tools: [chart] });
    try {
      const result = await (await runtime.openSession('s')).run(prompt).result;
      expect(result.status).toBe('succeeded');
    } finally {
      await runtime.close();
    }
    const [first, second] = anthropic.requests.map((r) => r.body as Body);
    expect(first!.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in these?' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64(PNG) } },
          { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
          { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: b64(PDF) }, title: 'report.pdf' },
        ],
      },
    ]);
    expect(second!.messages.at(-1)).toEqual({
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_1',
          content: [
            { type: 'text', text: 'the chart' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64(CHART) } },
          ],
        },
      ],
    });
  });

  it('a file of a media type the API does not take is refused before any request; so is an image in a system message', async () => {
    const model: ModelProvider = anthropicOf();
    const refused = await model
      .call(
        {
          messages: [{ role: 'user', content: [{ type: 'file', data: b64(PDF), mediaType: 'application/zip' }] }],
          tools: [],
          signal: new AbortController().signal,
        },
        () => {},
      )
      .catch((e: unknown) => e);
    expect(isProviderError(refused) && refused.providerCode).toBe('unsupported_content');
    const system = await model
      .call(
        {
          messages: [
            { role: 'system', content: [{ type: 'image', url: 'https://example.com/x.png' }] },
            { role: 'user', content: 'hi' },
          ],
          tools: [],
          signal: new AbortController().signal,
        },
        () => {},
      )
      .catch((e: unknown) => e);
    expect(isProviderError(system) && system.message).toContain('a system message cannot carry an image part');
    expect(anthropic.requests).toHaveLength(0);
  });
});

describe('content parts on the OpenAI Responses wire', () => {
  const model = () => openaiResponsesModel({ client: new OpenAI({ apiKey: 'test', baseURL: responses.baseURL }), model: 'gpt-test' });
  const call = (messages: ModelMessage[]) =>
    model()
      .call({ messages, tools: [], signal: new AbortController().signal }, () => {})
      .catch((e: unknown) => e);

  it.each([
    ['image', 'image/bmp'],
    ['image', 'image/svg+xml'],
    ['file', 'application/x-msdownload'],
    ['file', 'image/png'],
  ] as const)('an %s of media type %s is refused before any request, in user input and in a tool result', async (type, mediaType) => {
    const part = { type, data: b64(PNG), mediaType } as ContentPart;
    for (const messages of [
      [{ role: 'user', content: [part] }],
      [
        { role: 'user', content: 'chart it' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'chart', arguments: '{}' }] },
        { role: 'tool', toolCallId: 'call_1', name: 'chart', content: [{ type: 'text', text: 'the chart' }, part] },
      ],
    ] as ModelMessage[][]) {
      const refused = await call(messages);
      expect(refused).toMatchObject({ name: 'ProviderError', providerCode: 'unsupported_content', retryable: false });
      expect((refused as Error).message).toContain(`openai-responses: an ${type} of media type ${mediaType} is not supported`);
    }
    expect(responses.requests).toHaveLength(0);
  });

  it('the media types the API takes go as input_image and input_file', async () => {
    responses.reply(rs.textReply(['Seen.']));
    const res = await call([
      {
        role: 'user',
        content: [
          { type: 'image', data: b64(PNG), mediaType: 'image/webp' },
          { type: 'file', data: b64(PDF), mediaType: 'application/pdf' },
        ],
      },
    ]);
    expect(res).toMatchObject({ finishReason: 'stop' });
    expect(responses.requests).toHaveLength(1);
  });
});
