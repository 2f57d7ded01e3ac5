import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  anthropicModel,
  createRuntime,
  defineTool,
  memoryStore,
  openaiModel,
  openaiResponsesModel,
  type ModelProvider,
} from '../../src/index.js';
import { an } from './anthropic-server.js';
import { oa } from './openai-server.js';
import { rs } from './responses-server.js';
import { providerServers } from './provider-servers.js';

/**
 * A run's output schema on the wire, through the real SDK clients against the local servers:
 * OpenAI Chat Completions `response_format: json_schema` (strict where the schema allows),
 * OpenAI Responses `text.format` (the same, tools stay callable),
 * Anthropic Messages `output_config.format` (tools stay callable); the streamed JSON answer
 * becomes `result.output`.
 */

const { openai, anthropic, responses } = providerServers();

const Invoice = z.object({ number: z.string(), total: z.number() });
const invoice = { number: 'INV-7', total: 12.5 };
const invoiceJsonSchema = {
  type: 'object',
  properties: { number: { type: 'string' }, total: { type: 'number' } },
  required: ['number', 'total'],
  additionalProperties: false,
};
const gpt = () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openai.baseURL }), model: 'gpt-test' });
const claude = () =>
  anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anthropic.baseURL }), model: 'claude-test', maxTokens: 1024 });
const lookup = defineTool({
  name: 'lookup',
  description: 'Looks an invoice up',
  parameters: z.object({ id: z.string() }),
  execute: ({ id }) => `invoice ${id}: 12.5`,
});

async function run(model: ModelProvider, output: z.ZodType, tools = [lookup]) {
  const runtime = createRuntime({ store: memoryStore(), model, tools, systemPrompt: 'Extract invoices.' });
  try {
    const s = await runtime.openSession('s');
    return await s.run('INV-7 please', { output }).result;
  } finally {
    await runtime.close();
  }
}

describe('structured output on the wire', () => {
  it('openaiModel sends response_format json_schema, strict for a closed schema, and the streamed JSON is the output', async () => {
    openai.reply(oa.textReply(['{"number":"IN', 'V-7","total":12.5}']));
    const r = await run(gpt(), Invoice);
    expect(r.status).toBe('succeeded');
    expect(r.output).toEqual(invoice);
    const body = openai.lastBody();
    expect(body.response_format).toEqual({
      type: 'json_schema',
      json_schema: { name: 'final_answer', schema: invoiceJsonSchema, strict: true },
    });
    // a native mode: no instruction is joined to the system message, and the tools stay offered
    expect(body.messages[0]).toEqual({ role: 'system', content: 'Extract invoices.' });
    expect(body.tools.map((t: { function: { name: string } }) => t.function.name)).toEqual(['lookup']);
    // a run without a schema sends none
    openai.reply(oa.textReply(['hi']));
    const runtime = createRuntime({ store: memoryStore(), model: gpt() });
    await (await runtime.openSession('s')).run('x').result;
    await runtime.close();
    expect(openai.lastBody()).not.toHaveProperty('response_format');
  });

  it('openaiModel asks for strict: false when the schema has an optional property or an open object', async () => {
    openai.reply(oa.textReply(['{"number":"A"}']));
    const r = await run(gpt(), z.object({ number: z.string(), note: z.string().optional() }));
    expect(r.output).toEqual({ number: 'A' });
    expect(openai.lastBody().response_format.json_schema.strict).toBe(false);
    openai.reply(oa.textReply(['{"number":"A"}']));
    await run(gpt(), z.looseObject({ number: z.string() }));
    expect(openai.lastBody().response_format.json_schema.strict).toBe(false);
  });

  it('openaiResponsesModel sends text.format json_schema beside its tools; a function call first, then the JSON answer', async () => {
    responses.reply(rs.reasoningCallReply(rs.reasoning('rs_1', 'enc=='), rs.call('fc_1', 'call_1', 'lookup', '{"id":"INV-7"}')));
    responses.reply(rs.textReply(['{"number":"INV-7",', '"total":12.5}']));
    const model = openaiResponsesModel({ client: new OpenAI({ apiKey: 'test', baseURL: responses.baseURL }), model: 'gpt-test' });
    const r = await run(model, Invoice);
    expect(r.status).toBe('succeeded');
    expect(r.output).toEqual(invoice);
    expect(responses.requests).toHaveLength(2);
    for (const req of responses.requests) {
      expect(req.body.text).toEqual({ format: { type: 'json_schema', name: 'final_answer', schema: invoiceJsonSchema, strict: true } });
      expect(req.body.tools.map((t: { name: string }) => t.name)).toEqual(['lookup']);
      expect(req.body.input[0]).toEqual({ type: 'message', role: 'system', content: 'Extract invoices.' });
    }
  });

  it('anthropicModel sends output_config.format json_schema beside its tools; a tool call first, then the JSON answer', async () => {
    anthropic.reply(
      an.stream([
        an.start(),
        an.toolStart(0, 'toolu_1', 'lookup'),
        an.json(0, '{"id":"INV-7"}'),
        an.blockStop(0),
        an.messageDelta('tool_use'),
        an.stop(),
      ]),
      an.textReply(['{"number":"INV-7",', '"total":12.5}']),
    );
    const r = await run(claude(), Invoice);
    expect(r.status).toBe('succeeded');
    expect(r.output).toEqual(invoice);
    expect(anthropic.requests).toHaveLength(2);
    for (const req of anthropic.requests) {
      expect(req.body.output_config).toEqual({ format: { type: 'json_schema', schema: invoiceJsonSchema } });
      expect(req.body.tools.map((t: { name: string }) => t.name)).toEqual(['lookup']);
      expect(req.body).not.toHaveProperty('tool_choice');
      expect(req.body.system).toBe('Extract invoices.');
    }
  });

  it('an answer the API let through that fails zod is corrected through the model (the runtime validates whatever the provider claims)', async () => {
    anthropic.reply(an.textReply(['{"number":"INV-7","total":"12.5"}']), an.textReply([JSON.stringify(invoice)]));
    const r = await run(claude(), Invoice);
    expect(r.output).toEqual(invoice);
    const second = anthropic.requests[1]!.body.messages.at(-1);
    expect(JSON.stringify(second)).toContain('total: ');
  });
});
