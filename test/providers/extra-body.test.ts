import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { anthropicModel, openaiModel, openaiResponsesModel, type ModelRequestOutput, type ToolSpec } from '../../src/index.js';
import { an } from './anthropic-server.js';
import { oa } from './openai-server.js';
import { rs } from './responses-server.js';
import { callModel } from './sse-server.js';
import { providerServers } from './provider-servers.js';

/**
 * `extraBody` adds to the request body, it does not take away what the run needs: fields both
 * set are merged (lists extended, objects key by key), and the run's output schema stays. Real
 * SDK clients against the local wire servers; the assertions are on the bodies they sent.
 */

const { openai, anthropic, responses } = providerServers();

const output: ModelRequestOutput = {
  name: 'answer',
  schema: { type: 'object', properties: { n: { type: 'number' } }, required: ['n'], additionalProperties: false },
  strict: true,
};
const echo: ToolSpec = { name: 'echo', description: 'Echoes', parameters: { type: 'object', properties: {} } };

describe('extraBody merges into the request body', () => {
  it('Responses: text.verbosity joins the output schema, an include joins the encrypted reasoning, a server tool joins the run tools', async () => {
    responses.reply(rs.textReply(['{"n":1}']));
    const model = openaiResponsesModel({
      client: new OpenAI({ apiKey: 'test', baseURL: responses.baseURL }),
      model: 'o4-mini',
      extraBody: {
        text: { verbosity: 'low', format: { type: 'text' } },
        include: ['web_search_call.action.sources'],
        tools: [{ type: 'web_search' }],
      },
    });
    await callModel(model, { output, tools: [echo] }).response;
    const body = responses.requests[0]!.body;
    expect(body.text).toEqual({ verbosity: 'low', format: expect.objectContaining({ type: 'json_schema', name: 'answer' }) });
    expect(body.include).toEqual(['reasoning.encrypted_content', 'web_search_call.action.sources']);
    expect((body.tools as { type: string; name?: string }[]).map((t) => t.name ?? t.type)).toEqual(['echo', 'web_search']);
    expect(body.stream).toBe(true);
  });

  it('Messages: output_config.effort joins the output schema, a server tool joins the run tools', async () => {
    anthropic.reply(an.textReply(['{"n":1}']));
    const model = anthropicModel({
      client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }),
      model: 'claude-test',
      maxTokens: 1024,
      extraBody: { output_config: { effort: 'low' }, tools: [{ type: 'web_search_20250305', name: 'web_search' }] },
    });
    await callModel(model, { output, tools: [echo] }).response;
    const body = anthropic.requests[0]!.body;
    expect(body.output_config).toEqual({ effort: 'low', format: { type: 'json_schema', schema: output.schema } });
    expect((body.tools as { name: string }[]).map((t) => t.name)).toEqual(['echo', 'web_search']);
  });

  it("Chat Completions: a run's response_format is the run's; stream_options keeps include_usage beside the app's keys; a field the adapter does not set is the app's", async () => {
    openai.reply(oa.textReply(['{"n":1}']));
    const model = openaiModel({
      client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }),
      model: 'gpt-test',
      extraBody: { response_format: { type: 'json_object' }, stream_options: { include_obfuscation: false }, seed: 7 },
    });
    await callModel(model, { output }).response;
    const body = openai.requests[0]!.body;
    expect(body.response_format).toMatchObject({ type: 'json_schema', json_schema: { name: 'answer' } });
    expect(body.stream_options).toEqual({ include_usage: true, include_obfuscation: false });
    expect(body.seed).toBe(7);
    // without an output schema the app's response_format stands
    openai.reply(oa.textReply(['{}']));
    await callModel(model).response;
    expect(openai.requests[1]!.body.response_format).toEqual({ type: 'json_object' });
  });
});
