import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import {
  createRuntime,
  defineAgent,
  defineTool,
  memoryStore,
  scriptedModel,
  type AnyTool,
  type ExecutionSession,
  type Runtime,
  type ScriptedStep,
} from '../../../src/index.js';
import { deferred } from '../../helpers/drafts.js';
import { memoryTracing } from './otel.js';

// The GenAI conventions require `error.type` on a span that ends in error: every ERROR span has one.

/** A tool that runs until its signal aborts; `started` resolves when it runs. */
function blockingTool() {
  const started = deferred();
  const tool = defineTool({
    name: 'slow',
    description: 'Waits',
    parameters: z.object({}),
    execute: (_args, ctx) =>
      new Promise<string>((_, reject) => {
        started.resolve();
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
      }),
  });
  return { tool, started: started.promise };
}

/** A model step that answers after a minute (or its signal's abort); `started` resolves when it is asked. */
function slowModelStep() {
  const started = deferred();
  const step: ScriptedStep = () => {
    started.resolve();
    return { text: 'late', delayMs: 60_000 };
  };
  return { step, started: started.promise };
}

/** Runs one prompt on a traced runtime, doing `act` once `started` resolves; the spans once the runtime closed. */
async function traced(
  o: { steps: ScriptedStep[]; started?: Promise<void>; tools?: AnyTool[] },
  act: (session: ExecutionSession, runtime: Runtime) => Promise<unknown>,
): Promise<ReadableSpan[]> {
  const t = memoryTracing();
  const runtime = createRuntime({
    store: memoryStore(),
    model: scriptedModel(o.steps),
    tools: o.tools ?? [],
    tracing: { tracerProvider: t.provider },
  });
  const session = await runtime.openSession('s1');
  const result = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
  await o.started;
  await act(session, runtime);
  await result;
  await runtime.close();
  return t.spans();
}

/** A lead agent that hands off to a writer running `writerSteps` (with `tools`). */
function handingOff(writerSteps: ScriptedStep[], tools: AnyTool[] = []) {
  const writer = defineAgent({
    name: 'writer',
    instructions: 'Write.',
    tools,
    model: scriptedModel(writerSteps, { modelId: 'writer-model' }),
  });
  return defineAgent({
    name: 'lead',
    instructions: 'Lead.',
    handoffs: [writer],
    model: scriptedModel([{ toolCalls: [{ id: 'h1', name: 'transfer_to_writer', arguments: {} }] }], { modelId: 'lead-model' }),
  });
}

/** Each ERROR span (in the order they ended) as its GenAI operation and error.type. */
const errors = (spans: readonly ReadableSpan[]) =>
  spans.filter((s) => s.status.code === 2).map((s) => [s.attributes['gen_ai.operation.name'], s.attributes['error.type']]);

describe('every span that ends in error has error.type', () => {
  it('the runtime closed during a tool call: the tool call and the attempt end with error.type closed', async () => {
    const slow = blockingTool();
    const spans = await traced(
      { steps: [{ toolCalls: [{ id: 'c1', name: 'slow', arguments: {} }] }, 'done'], tools: [slow.tool], started: slow.started },
      (_s, rt) => rt.close(),
    );
    expect(errors(spans)).toEqual([
      ['execute_tool', 'closed'],
      ['invoke_agent', 'closed'],
    ]);
  });

  it('the session closed during a tool call: the tool call and the attempt end with error.type closed', async () => {
    const slow = blockingTool();
    const spans = await traced(
      { steps: [{ toolCalls: [{ id: 'c1', name: 'slow', arguments: {} }] }, 'done'], tools: [slow.tool], started: slow.started },
      (s) => s.close(),
    );
    expect(errors(spans)).toEqual([
      ['execute_tool', 'closed'],
      ['invoke_agent', 'closed'],
    ]);
  });

  it('the runtime closed during a model call: the model call has its error class, the attempt error.type closed', async () => {
    const slow = slowModelStep();
    const spans = await traced({ steps: [slow.step], started: slow.started }, (_s, rt) => rt.close());
    expect(errors(spans)).toEqual([
      ['chat', 'CancelledError'],
      ['invoke_agent', 'closed'],
    ]);
  });

  it("a cancel during a tool call or a model call: error.type is the outcome kind, the result's error kind", async () => {
    const slow = blockingTool();
    const duringTool = await traced(
      { steps: [{ toolCalls: [{ id: 'c1', name: 'slow', arguments: {} }] }, 'done'], tools: [slow.tool], started: slow.started },
      (s) => s.requestCancel(),
    );
    expect(errors(duringTool)).toEqual([
      ['execute_tool', 'cancelled'],
      ['invoke_agent', 'cancelled'],
    ]);
    const model = slowModelStep();
    const duringModel = await traced({ steps: [model.step], started: model.started }, (s) => s.requestCancel());
    expect(errors(duringModel)).toEqual([
      ['chat', 'CancelledError'],
      ['invoke_agent', 'cancelled'],
    ]);
  });

  it("a model error: the model call has the provider's code, the attempt the result's error kind", async () => {
    const spans = await traced({ steps: [{ error: { message: 'bad key', retryable: false, code: 'auth' } }] }, async () => {});
    expect(errors(spans)).toEqual([
      ['chat', 'auth'],
      ['invoke_agent', 'execution'],
    ]);
  });

  it("closed while the agent handed to runs: its invoke_agent span ends with error.type closed, as the attempt's does", async () => {
    const slow = blockingTool();
    const lead = handingOff([{ toolCalls: [{ id: 'c1', name: 'slow', arguments: {} }] }], [slow.tool]);
    const t = memoryTracing();
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([]),
      agents: [lead],
      tracing: { tracerProvider: t.provider },
    });
    const session = await runtime.openSession('s1', { agent: lead });
    const result = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await slow.started;
    await runtime.close();
    await result;
    const failed = t.spans().filter((s) => s.status.code === 2);
    expect(failed.map((s) => [s.name, s.attributes['error.type']])).toEqual([
      ['execute_tool slow', 'closed'],
      ['invoke_agent writer', 'closed'],
      ['invoke_agent lead', 'closed'],
    ]);
  });

  it("a run failing while the agent handed to runs: its invoke_agent span has the result's error kind, as the attempt's", async () => {
    const lead = handingOff([{ error: { message: 'bad key', retryable: false, code: 'auth' } }]);
    const t = memoryTracing();
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([]),
      agents: [lead],
      tracing: { tracerProvider: t.provider },
    });
    const session = await runtime.openSession('s1', { agent: lead });
    expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' })).status).toBe('failed');
    await runtime.close();
    const failed = t.spans().filter((s) => s.status.code === 2);
    expect(failed.map((s) => [s.name, s.attributes['error.type'], s.events.map((e) => e.name)])).toEqual([
      ['chat writer-model', 'auth', ['exception']],
      ['invoke_agent writer', 'execution', []],
      ['invoke_agent lead', 'execution', ['exception']],
    ]);
  });
});
