import { describe, expect, it } from 'vitest';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { agentTool, createRuntime, defineAgent, memoryStore, scriptedModel } from '../../../src/index.js';
import { hookedStore } from '../../helpers/lmdb-path.js';
import { asyncContext, memoryTracing, tree } from './otel.js';

// Which agent ran: the invoke_agent spans are named after it (GenAI `invoke_agent {gen_ai.agent.name}`).

const usage = { inputTokens: 5, outputTokens: 2 };
const nanos = ([s, ns]: [number, number]) => s * 1e9 + ns;
/** The spans that end after their parent (name > parent's name). */
function endingAfterParent(spans: readonly ReadableSpan[]): string[] {
  const byId = new Map(spans.map((s) => [s.spanContext().spanId, s]));
  return spans.flatMap((s) => {
    const parent = s.parentSpanContext && byId.get(s.parentSpanContext.spanId);
    return parent && nanos(s.endTime) > nanos(parent.endTime) ? [`${s.name} > ${parent.name}`] : [];
  });
}

describe('invoke_agent spans name the agent', () => {
  it("an attempt's span is `invoke_agent <agent>` with gen_ai.agent.name; the runtime's own agent is `default`", async () => {
    const t = memoryTracing();
    const lead = defineAgent({ name: 'lead', instructions: 'Lead.', model: scriptedModel(['led'], { modelId: 'lead-model' }) });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel(['hi']),
      agents: [lead],
      tracing: { tracerProvider: t.provider },
    });
    await (await runtime.openSession('plain')).execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
    await (await runtime.openSession('led', { agent: lead })).execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
    await runtime.close();
    const attempts = t.spans().filter((s) => s.attributes['gen_ai.operation.name'] === 'invoke_agent');
    expect(attempts.map((s) => [s.attributes['actorloop.session.id'], s.name, s.attributes['gen_ai.agent.name']])).toEqual([
      ['plain', 'invoke_agent default', 'default'],
      ['led', 'invoke_agent lead', 'lead'],
    ]);
  });

  it("an agentTool call's child session is an `invoke_agent <child agent>` span under the call's execute_tool span", async () => {
    const t = memoryTracing();
    const researcher = defineAgent({
      name: 'researcher',
      instructions: 'Research.',
      model: scriptedModel([{ text: 'notes', usage }], { modelId: 'research-model' }),
    });
    const lead = defineAgent({
      name: 'lead',
      instructions: 'Lead.',
      tools: [agentTool(researcher)],
      model: scriptedModel(
        [
          { toolCalls: [{ id: 'r1', name: 'researcher', arguments: { input: 'tea' } }], usage },
          { text: 'done', usage },
        ],
        { modelId: 'lead-model' },
      ),
    });
    // the child's attempt span nests under the call's span through the active context, as with the Node SDK
    const removeContext = asyncContext();
    try {
      const runtime = createRuntime({
        store: memoryStore(),
        model: scriptedModel([]),
        agents: [lead],
        tracing: { tracerProvider: t.provider },
      });
      const session = await runtime.openSession('s1', { agent: lead });
      expect((await session.run('go').result).status).toBe('succeeded');
      await runtime.close();
    } finally {
      removeContext();
    }
    const spans = t.spans();
    expect(tree(spans)).toBe(
      [
        'invoke_agent lead',
        '  actorloop.step',
        '    chat lead-model',
        '    execute_tool researcher',
        '      invoke_agent researcher',
        '        actorloop.step',
        '          chat research-model',
        '  actorloop.step',
        '    chat lead-model',
      ].join('\n'),
    );
    const child = spans.find((s) => s.name === 'invoke_agent researcher')!;
    expect(child.attributes).toMatchObject({ 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': 'researcher' });
    expect(child.attributes['actorloop.session.id']).toMatch(/^s1\/.*\/r1$/);
  });

  it("after a handoff, the target's steps are under an `invoke_agent <target>` span, a child of the attempt's", async () => {
    const t = memoryTracing();
    const writer = defineAgent({
      name: 'writer',
      instructions: 'Write.',
      model: scriptedModel([{ text: 'REPORT', usage }], { modelId: 'writer-model' }),
    });
    const lead = defineAgent({
      name: 'lead',
      instructions: 'Lead.',
      handoffs: [writer],
      model: scriptedModel([{ toolCalls: [{ id: 'h1', name: 'transfer_to_writer', arguments: {} }], usage }], { modelId: 'lead-model' }),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([]),
      agents: [lead],
      tracing: { tracerProvider: t.provider },
    });
    const session = await runtime.openSession('s1', { agent: lead });
    expect((await session.run('go').result).status).toBe('succeeded');
    // the session runs the writer from now on: the next run's attempt is the writer's
    await runtime.close();
    const spans = t.spans();
    expect(tree(spans)).toBe(
      [
        'invoke_agent lead',
        '  actorloop.step',
        '    chat lead-model',
        '    execute_tool transfer_to_writer',
        '  invoke_agent writer',
        '    actorloop.step',
        '      chat writer-model',
      ].join('\n'),
    );
    const attempt = spans.find((s) => s.name === 'invoke_agent lead')!;
    const target = spans.find((s) => s.name === 'invoke_agent writer')!;
    expect(attempt.attributes).toMatchObject({ 'gen_ai.agent.name': 'lead', 'gen_ai.usage.output_tokens': 4 });
    expect(target.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'writer',
      'actorloop.handoff.from': 'lead',
      'actorloop.run.id': attempt.attributes['actorloop.run.id'],
    });
    expect(target.status.code).not.toBe(2);
    expect(spans.filter((s) => s.name === 'actorloop.step').map((s) => s.attributes['gen_ai.agent.name'])).toEqual(['lead', 'writer']);
  });

  it("an agent handed to in turn ends its span after its last step, whose results land under the next agent's model call", async () => {
    const t = memoryTracing();
    const transfer = (to: string) => ({ toolCalls: [{ id: `to-${to}`, name: `transfer_to_${to}`, arguments: {} }] });
    const editor = defineAgent({ name: 'editor', instructions: 'Edit.', model: scriptedModel(['edited'], { modelId: 'editor-model' }) });
    const writer = defineAgent({
      name: 'writer',
      instructions: 'Write.',
      handoffs: [editor],
      model: scriptedModel([transfer('editor')], { modelId: 'writer-model' }),
    });
    const lead = defineAgent({
      name: 'lead',
      instructions: 'Lead.',
      handoffs: [writer],
      model: scriptedModel([transfer('writer')], { modelId: 'lead-model' }),
    });
    // each step's results take a while to land: the next agent's model call starts first
    const slowResults = (drafts: { type: string }[]) =>
      drafts.some((d) => d.type === 'tool/result') ? new Promise<void>((r) => setTimeout(r, 30)) : undefined;
    const runtime = createRuntime({
      store: hookedStore(memoryStore(), slowResults),
      model: scriptedModel([]),
      agents: [lead],
      tracing: { tracerProvider: t.provider },
    });
    const session = await runtime.openSession('s1', { agent: lead });
    expect((await session.run('go').result).status).toBe('succeeded');
    await runtime.close();
    const spans = t.spans();
    expect(tree(spans)).toBe(
      [
        'invoke_agent lead',
        '  actorloop.step',
        '    chat lead-model',
        '    execute_tool transfer_to_writer',
        '  invoke_agent writer',
        '    actorloop.step',
        '      chat writer-model',
        '      execute_tool transfer_to_editor',
        '  invoke_agent editor',
        '    actorloop.step',
        '      chat editor-model',
      ].join('\n'),
    );
    expect(spans.find((s) => s.name === 'invoke_agent editor')!.attributes['actorloop.handoff.from']).toBe('writer');
    expect(endingAfterParent(spans)).toEqual([]);
  });

  it('a later run of a session handed over is an attempt of the target agent', async () => {
    const t = memoryTracing();
    const writer = defineAgent({
      name: 'writer',
      instructions: 'Write.',
      model: scriptedModel(['one', 'two'], { modelId: 'writer-model' }),
    });
    const lead = defineAgent({
      name: 'lead',
      instructions: 'Lead.',
      handoffs: [writer],
      model: scriptedModel([{ toolCalls: [{ id: 'h1', name: 'transfer_to_writer', arguments: {} }] }], { modelId: 'lead-model' }),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([]),
      agents: [lead],
      tracing: { tracerProvider: t.provider },
    });
    const session = await runtime.openSession('s1', { agent: lead });
    await session.run('first').result;
    await session.run('second').result;
    await runtime.close();
    const roots = t.spans().filter((s) => s.parentSpanContext === undefined);
    expect(roots.map((s) => s.name)).toEqual(['invoke_agent lead', 'invoke_agent writer']);
  });
});
