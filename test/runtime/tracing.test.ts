import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { trace } from '@opentelemetry/api';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import {
  anthropicModel,
  createRuntime,
  defineTool,
  isValidationError,
  lmdbStore,
  memoryStore,
  openaiModel,
  scriptedModel,
  type EventStore,
  type ModelProvider,
} from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { an, startAnthropicServer } from '../providers/anthropic-server.js';
import { oa, startOpenAIServer } from '../providers/openai-server.js';
import { memoryTracing, tree } from './tracing/otel.js';

const dir = tempDir('actorloop-tracing-');
afterEach(async () => {
  await killAllChildren();
});
afterAll(async () => {
  await dir.cleanup();
});

const usage = { inputTokens: 11, outputTokens: 7 };
const add = defineTool({
  name: 'add',
  description: 'Adds',
  mode: 'parallel',
  parameters: z.object({ a: z.number(), b: z.number() }),
  execute: ({ a, b }) => String(a + b),
});
const pay = defineTool({
  name: 'pay',
  description: 'Pays',
  needsApproval: true,
  parameters: z.object({ to: z.string() }),
  execute: ({ to }) => `paid ${to}`,
});
const events = (store: EventStore): Promise<EventRecord[]> => collect(store.readEvents('s1'));

/** A run with a tool, a provider retry and an approval (two attempts). */
async function approvalRun(recordContent: boolean) {
  const t = memoryTracing();
  const store = memoryStore();
  const model = scriptedModel([
    { error: { message: 'overloaded', retryable: true, code: 'overloaded' } },
    { toolCalls: [{ id: 'c1', name: 'add', arguments: { a: 2, b: 3 } }], usage },
    { toolCalls: [{ id: 'c2', name: 'pay', arguments: { to: 'ACME' } }], usage },
    { text: 'Paid.', usage },
  ]);
  const runtime = createRuntime({
    store,
    model,
    tools: [add, pay],
    config: { retryBackoffMs: 1 },
    tracing: { tracerProvider: t.provider, recordContent },
  });
  const session = await runtime.openSession('s1');
  const first = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'secret prompt' });
  expect(first.status).toBe('suspended');
  const second = await session.execute({
    kind: 'respond',
    runId: 'r1',
    attemptId: 'a2',
    questionId: first.pendingRequest!.questionId,
    answer: { decisions: { c2: 'approve' } },
  });
  expect(second.status).toBe('succeeded');
  const log = await events(store);
  await runtime.close();
  return { spans: t.spans(), log };
}

describe('OpenTelemetry spans', () => {
  it('a run with tools, a retry and an approval: attempt → step → model call / tool call, the second attempt linked to the first', async () => {
    const { spans, log } = await approvalRun(false);
    expect(tree(spans)).toBe(
      [
        'invoke_agent default',
        '  actorloop.step',
        '    chat scripted !',
        '    chat scripted',
        '    execute_tool add',
        '  actorloop.step',
        '    chat scripted',
        'invoke_agent default',
        '  execute_tool pay',
        '  actorloop.step',
        '    chat scripted',
      ].join('\n'),
    );
    const [a1, a2] = spans
      .filter((s) => s.name === 'invoke_agent default')
      .sort((x, y) => Number(x.attributes['actorloop.attempt']) - Number(y.attributes['actorloop.attempt']));
    // ids recorded in each run/start; the respond attempt links to the suspended one
    const starts = log.filter((e) => e.type === 'run/start').map((e) => e.payload.trace);
    expect(starts).toEqual([
      { traceId: a1!.spanContext().traceId, spanId: a1!.spanContext().spanId },
      { traceId: a2!.spanContext().traceId, spanId: a2!.spanContext().spanId },
    ]);
    expect(a2!.links).toHaveLength(1);
    expect(a2!.links[0]!.context.spanId).toBe(a1!.spanContext().spanId);
    expect(a2!.links[0]!.attributes).toMatchObject({
      'actorloop.previous_attempt.status': 'suspended',
      'actorloop.previous_attempt.id': 'a1',
    });
    expect(a1!.attributes).toMatchObject({
      'actorloop.session.id': 's1',
      'actorloop.run.id': 'r1',
      'actorloop.attempt': 1,
      'actorloop.run.status': 'suspended',
      'gen_ai.operation.name': 'invoke_agent',
    });
    expect(a1!.attributes['actorloop.run_start.seq']).toBe(log.find((e) => e.type === 'run/start')!.seq);
    expect(a2!.attributes).toMatchObject({ 'actorloop.attempt': 2, 'actorloop.run.status': 'succeeded', 'gen_ai.usage.output_tokens': 21 });
    const steps = spans.filter((s) => s.name === 'actorloop.step');
    expect(steps[1]!.events.map((e) => e.name)).toEqual(['actorloop.approval_requested']);
    const chats = spans.filter((s) => s.name.startsWith('chat '));
    const failed = chats.find((s) => s.status.code === 2)!;
    expect(failed.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'scripted',
      'error.type': 'overloaded',
      'actorloop.model_call.attempt': 1,
    });
    expect(failed.events.map((e) => e.name)).toEqual(['exception']);
    const ok = chats.filter((s) => s.status.code !== 2);
    expect(ok.map((s) => s.attributes['gen_ai.usage.input_tokens'])).toEqual([11, 11, 11]);
    expect(ok.map((s) => s.attributes['gen_ai.response.finish_reasons'])).toEqual([['tool_calls'], ['tool_calls'], ['stop']]);
    const tool = spans.find((s) => s.name === 'execute_tool add')!;
    expect(tool.attributes).toMatchObject({
      'gen_ai.tool.name': 'add',
      'gen_ai.tool.call.id': 'c1',
      'actorloop.tool.mode': 'parallel',
      'actorloop.tool.outcome': 'completed',
      'actorloop.run.id': 'r1',
    });
    expect(tool.attributes['actorloop.tool_call.seq']).toBe(log.find((e) => e.type === 'tool/call' && e.payload.callId === 'c1')!.seq);
    expect(spans.find((s) => s.name === 'execute_tool pay')!.attributes).toMatchObject({
      'actorloop.tool.mode': 'exclusive',
      'actorloop.attempt': 2,
    });
    for (const s of spans) expect(s.attributes['actorloop.session.id']).toBe('s1');
    // no prompt, model output or tool arguments unless asked for
    const all = JSON.stringify(spans.map((s) => s.attributes));
    expect(all).not.toContain('secret prompt');
    expect(all).not.toContain('ACME');
  });

  it('recordContent puts prompts, output, tool arguments and results in spans', async () => {
    const { spans } = await approvalRun(true);
    const all = JSON.stringify(spans.map((s) => s.attributes));
    expect(all).toContain('secret prompt');
    expect(spans.find((s) => s.name === 'execute_tool pay')!.attributes).toMatchObject({
      'gen_ai.tool.call.arguments': '{"to":"ACME"}',
      'gen_ai.tool.call.result': 'paid ACME',
    });
  });

  it('an attempt resumed after a crash (SIGKILL mid-tool) links to the interrupted attempt whose ids the log holds', async () => {
    const path = join(dir.path, 'crash');
    const child = spawnTs('test/runtime/tracing/crash-child.ts', [path], { label: 'tracing crash child' });
    await child.waitFor((l) => l === 'BLOCKING', 30_000, 'the tool to start');
    child.signal('SIGKILL');
    await child.exited;
    const t = memoryTracing();
    const store = lmdbStore({ path });
    const runtime = createRuntime({
      store,
      model: scriptedModel(['recovered']),
      tools: [defineTool({ name: 'block', description: 'Blocks', parameters: z.object({}), execute: () => 'never' })],
      tracing: { tracerProvider: t.provider },
    });
    const session = await runtime.openSession('s1');
    const r = await session.execute({ kind: 'continue', runId: 'r1', attemptId: 'a2' });
    expect(r.status).toBe('succeeded');
    const log = await events(store);
    const interrupted = log.find((e) => e.type === 'run/start')!.payload.trace as { traceId: string; spanId: string };
    expect(interrupted.traceId).toMatch(/^[0-9a-f]{32}$/);
    const spans = t.spans();
    expect(tree(spans)).toBe(['invoke_agent default', '  execute_tool block !', '  actorloop.step', '    chat scripted'].join('\n'));
    const attempt = spans.find((s) => s.name === 'invoke_agent default')!;
    expect(attempt.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.['actorloop.previous_attempt.status']])).toEqual([
      [interrupted.traceId, interrupted.spanId, 'interrupted'],
    ]);
    expect(spans.find((s) => s.name === 'execute_tool block')!.attributes).toMatchObject({
      'actorloop.tool.outcome': 'uncertain-hanging',
      'error.type': 'uncertain-hanging',
    });
    await runtime.close();
  });

  it("a failed run's attempt span records the error", async () => {
    const t = memoryTracing();
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ error: { message: 'bad key', retryable: false, code: 'auth' } }]),
      tracing: { tracerProvider: t.provider },
    });
    const session = await runtime.openSession('s1');
    expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })).status).toBe('failed');
    await runtime.close();
    const attempt = t.spans().find((s) => s.name === 'invoke_agent default')!;
    expect(attempt.status).toMatchObject({ code: 2 });
    expect(attempt.attributes).toMatchObject({ 'actorloop.run.status': 'failed', 'error.type': 'execution' });
    // the typed cause itself (its readonly `code` discriminant is what the SDK reports as the type)
    expect(attempt.events.map((e) => [e.name, e.attributes?.['exception.type'], String(e.attributes?.['exception.message'])])).toEqual([
      ['exception', 'provider', 'bad key'],
    ]);
  });

  it('is a no-op when no tracer provider is registered, and off with tracing: false', async () => {
    for (const tracing of [undefined, false] as const) {
      const store = memoryStore();
      const runtime = createRuntime({
        store,
        model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'add', arguments: { a: 1, b: 1 } }] }, 'two']),
        tools: [add],
        ...(tracing === false ? { tracing } : {}),
      });
      const session = await runtime.openSession('s1');
      expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })).status).toBe('succeeded');
      expect((await events(store)).find((e) => e.type === 'run/start')!.payload.trace).toBeUndefined();
      await runtime.close();
    }
  });

  it('uses the globally registered tracer provider by default', async () => {
    const t = memoryTracing();
    trace.setGlobalTracerProvider(t.provider);
    try {
      const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['hi']) });
      const session = await runtime.openSession('s1');
      await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
      await runtime.close();
      expect(tree(t.spans())).toBe(['invoke_agent default', '  actorloop.step', '    chat scripted'].join('\n'));
    } finally {
      trace.disable();
    }
  });

  it('a model call span names the provider (gen_ai.provider.name) from the ModelProvider; a provider without providerName gets none', async () => {
    const openaiServer = await startOpenAIServer();
    const anthropicServer = await startAnthropicServer();
    try {
      openaiServer.reply(oa.textReply(['hi']));
      anthropicServer.reply(an.textReply(['hi']));
      const scripted = scriptedModel(['hi']);
      const custom: ModelProvider = { modelId: 'in-house', call: (r) => scriptedModel(['hi']).call(r, () => {}) };
      const models: ModelProvider[] = [
        openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: openaiServer.baseURL }), model: 'gpt-test' }),
        anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anthropicServer.baseURL }), model: 'claude-test' }),
        scripted,
        custom,
        { ...custom, providerName: 'my_company' },
      ];
      const named: [string, unknown][] = [];
      for (const model of models) {
        const t = memoryTracing();
        const runtime = createRuntime({ store: memoryStore(), model, tracing: { tracerProvider: t.provider } });
        const session = await runtime.openSession('s1');
        expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })).status).toBe('succeeded');
        await runtime.close();
        const chat = t.spans().find((s) => s.name.startsWith('chat '))!;
        named.push([String(chat.attributes['gen_ai.request.model']), chat.attributes['gen_ai.provider.name']]);
      }
      expect(named).toEqual([
        ['gpt-test', 'openai'],
        ['claude-test', 'anthropic'],
        ['scripted', 'actorloop.scripted'],
        ['in-house', undefined],
        ['in-house', 'my_company'],
      ]);
      const bad = (() => {
        try {
          return createRuntime({ model: { ...custom, providerName: '' } });
        } catch (e) {
          return e;
        }
      })();
      expect(isValidationError(bad) && (bad as Error).message).toMatch(/model: .*providerName, if any, a non-empty string/);
    } finally {
      await openaiServer.close();
      await anthropicServer.close();
    }
  });

  it('a tool error result: status ERROR with error.type tool_error and no exception event; its text is in the status only with recordContent', async () => {
    const secret = 'card 4111-1111 declined for ACME';
    const declines = defineTool({
      name: 'charge',
      description: 'Charges',
      parameters: z.object({}),
      execute: () => ({ kind: 'completed', content: secret, isError: true }),
    });
    const throws = defineTool({
      name: 'boom',
      description: 'Throws',
      parameters: z.object({}),
      execute: () => {
        throw new Error(secret);
      },
    });
    for (const recordContent of [false, true]) {
      const t = memoryTracing();
      const model = scriptedModel([
        { toolCalls: [{ id: 'c1', name: 'charge', arguments: {} }] },
        { toolCalls: [{ id: 'c2', name: 'boom', arguments: {} }] },
        'done',
      ]);
      const runtime = createRuntime({
        store: memoryStore(),
        model,
        tools: [declines, throws],
        tracing: { tracerProvider: t.provider, recordContent },
      });
      const session = await runtime.openSession('s1');
      expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'pay' })).status).toBe('succeeded');
      await runtime.close();
      const tools = t.spans().filter((s) => s.name.startsWith('execute_tool '));
      expect(tools.map((s) => [s.name, s.status.code, s.attributes['error.type'], s.events.map((e) => e.name)])).toEqual([
        ['execute_tool charge', 2, 'tool_error', []],
        ['execute_tool boom', 2, 'tool_error', []],
      ]);
      if (recordContent) expect(tools.map((s) => s.status.message)).toEqual([secret, expect.stringContaining(secret)]);
      else {
        expect(tools.map((s) => s.status.message)).toEqual(['the tool returned an error result', 'the tool returned an error result']);
        expect(JSON.stringify(t.spans().map((s) => [s.attributes, s.status, s.events]))).not.toContain('4111');
      }
    }
  });
});
