import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  agentTool,
  createRuntime,
  defineAgent,
  defineTool,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type ScriptedStep,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { logOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// Handoffs: transfer_to_<name> tools; agent/handoff; the session goes on with the target agent.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const note = defineTool({ name: 'note', description: 'notes', parameters: z.object({}), mode: 'parallel', execute: () => 'noted' });
const transfer = (id: string): ScriptedStep => ({ toolCalls: [{ id, name: 'transfer_to_writer', arguments: {} }] });

function agents(leadSteps: ScriptedStep[], writerSteps: ScriptedStep[]) {
  const leadModel = scriptedModel(leadSteps, { modelId: 'lead-model' });
  const writerModel = scriptedModel(writerSteps, { modelId: 'writer-model' });
  const writer = defineAgent({
    name: 'writer',
    instructions: 'You write.',
    model: writerModel,
    tools: [note],
    output: z.object({ report: z.string() }),
  });
  const lead = defineAgent({ name: 'lead', instructions: 'You lead.', model: leadModel, handoffs: [writer] });
  return { lead, writer, leadModel, writerModel };
}

describe('handoffs', () => {
  it('an agent is offered transfer_to_<name> with empty arguments; calling it commits agent/handoff and the next step is the target agent', async () => {
    const store = memoryStore();
    const { lead, leadModel, writerModel } = agents([transfer('t1')], [JSON.stringify({ report: 'done' })]);
    const runtime = createRuntime({ store, model: scriptedModel([]), agents: [lead] });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s', { agent: 'lead' });
    const r = await s.run('write a report').result;
    const spec = leadModel.requests[0]!.tools.find((t) => t.name === 'transfer_to_writer')!;
    expect(spec.parameters).toMatchObject({ type: 'object', properties: {} });
    // the writer's instructions, tools and model from the next step, and its output schema for the run's answer
    expect(writerModel.requests[0]!.messages[0]).toMatchObject({
      role: 'system',
      content: expect.stringMatching(/^You write\.\n\n.*JSON/),
    });
    expect(writerModel.requests[0]!.tools.map((t) => t.name)).toEqual(['note']);
    expect(r).toMatchObject({ status: 'succeeded', output: { report: 'done' } });
    const log = await logOf(store, 's');
    const handoff = log.find((e) => e.type === 'agent/handoff')!;
    expect(handoff.payload).toMatchObject({ from: 'lead', to: 'writer', callId: 't1' });
    // committed with the transfer call's result, in one append
    const result = log.find((e) => e.type === 'tool/result' && e.payload.callId === 't1')!;
    expect(result.payload.outcome).toMatchObject({ kind: 'completed', content: 'Transferred to writer.' });
  });

  it('later runs of the session, in this process and after a restart, run the agent handed to', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const first = agents([transfer('t1')], [JSON.stringify({ report: 'one' }), JSON.stringify({ report: 'two' })]);
    const rt1 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel([]), agents: [first.lead] });
    const s1 = await rt1.openSession('s', { agent: 'lead' });
    await s1.run('first').result;
    expect((await s1.run('second').result).output).toEqual({ report: 'two' });
    expect(first.leadModel.requests).toHaveLength(1);
    await rt1.close();
    const second = agents([], [JSON.stringify({ report: 'three' })]);
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel([]), agents: [second.lead] });
    cleanups.push(() => rt2.close());
    const s2 = await rt2.openSession('s', { agent: 'lead' });
    expect((await s2.run('third').result).output).toEqual({ report: 'three' });
    const log = await logOf(rt2.store, 's');
    expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.agent)).toEqual(['lead', 'writer', 'writer']);
  });

  it('a crash after the handoff committed resumes the run with the agent handed to', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const writerCalled = deferred();
    // life 1: the lead transfers, then the process dies while the writer's model call runs
    const first = agents(
      [transfer('t1')],
      [
        () => {
          writerCalled.resolve();
          return { text: 'never', delayMs: 3_600_000 };
        },
      ],
    );
    const rt1 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel([]), agents: [first.lead] });
    const s1 = await rt1.openSession('s', { agent: 'lead' });
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'write' });
    await writerCalled.promise;
    // life 2 (rt1 abandoned, as a killed process): the writer answers; the lead's model is never called
    const second = agents([], [JSON.stringify({ report: 'after the crash' })]);
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel([]), agents: [second.lead] });
    cleanups.push(() => rt2.close());
    const s2 = await rt2.openSession('s');
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    expect(r).toMatchObject({ status: 'succeeded', output: { report: 'after the crash' } });
    expect(second.leadModel.requests).toHaveLength(0);
    expect(second.writerModel.requests[0]!.messages[0]).toMatchObject({ role: 'system', content: expect.stringMatching(/^You write\./) });
    const starts = (await logOf(rt2.store, 's')).filter((e) => e.type === 'run/start');
    expect(starts.map((e) => e.payload.agent)).toEqual(['lead', 'writer']);
  });

  it('of two transfer calls in one step the first hands off; the second is answered that it did not', async () => {
    const store = memoryStore();
    const other = defineAgent({ name: 'other', instructions: 'other' });
    const writerModel = scriptedModel(['written']);
    const writer = defineAgent({ name: 'writer', instructions: 'You write.', model: writerModel });
    const leadModel = scriptedModel([
      {
        toolCalls: [
          { id: 't1', name: 'transfer_to_writer', arguments: {} },
          { id: 't2', name: 'transfer_to_other', arguments: {} },
        ],
      },
    ]);
    const lead = defineAgent({ name: 'lead', instructions: 'lead', model: leadModel, handoffs: [writer, other] });
    const runtime = createRuntime({ store, model: scriptedModel([]), agents: [lead] });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s', { agent: lead });
    expect((await s.run('go').result).finalMessage).toBe('written');
    const log = await logOf(store, 's');
    expect(log.filter((e) => e.type === 'agent/handoff').map((e) => e.payload.to)).toEqual(['writer']);
    const second = log.find((e) => e.type === 'tool/result' && e.payload.callId === 't2')!;
    expect(second.payload.outcome).toMatchObject({ isError: true, content: expect.stringMatching(/Not transferred/) });
  });
});

describe('a handoff in a step whose agent calls are held back', () => {
  it("does not hand over while the step's calls wait: the approved call runs as the agent that asked for it, once, and the model may transfer again", async () => {
    const store = memoryStore();
    const charged: string[] = [];
    const charge = defineTool({
      name: 'charge',
      description: 'charges',
      parameters: z.object({ amount: z.number() }),
      mode: 'exclusive',
      needsApproval: true,
      execute: ({ amount }, ctx) => {
        charged.push(ctx.idempotencyKey);
        return `charged ${amount}`;
      },
    });
    const payer = defineAgent({
      name: 'payer',
      instructions: 'You pay.',
      tools: [charge],
      model: scriptedModel([{ toolCalls: [{ id: 'k1', name: 'charge', arguments: { amount: 5 } }] }, 'paid 5']),
    });
    const { writer, writerModel } = agents([], [JSON.stringify({ report: 'done' })]);
    const leadModel = scriptedModel([
      {
        toolCalls: [
          { id: 't1', name: 'transfer_to_writer', arguments: {} },
          { id: 'c1', name: 'payer', arguments: { input: 'pay 5' } },
        ],
      },
      transfer('t2'),
    ]);
    const payingLead = defineAgent({
      name: 'lead',
      instructions: 'You lead.',
      model: leadModel,
      handoffs: [writer],
      tools: [agentTool(payer)],
    });
    const runtime = createRuntime({ store, model: scriptedModel([]), agents: [payingLead] });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s', { agent: 'lead' });
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'pay, then report' });
    expect(r1).toMatchObject({ status: 'suspended', pendingRequest: { path: ['s/r/1/c1'] } });
    const decided = await s.approve('k1');
    expect(await decided.run!.result).toMatchObject({ status: 'succeeded', output: { report: 'done' } });
    expect(charged).toEqual(['s/r/1/c1/answer/1/k1']);
    const log = await logOf(store, 's');
    const results = log
      .filter((e) => e.type === 'tool/result')
      .map((e) => [e.payload.callId, (e.payload.outcome as { content: unknown }).content]);
    expect(results).toEqual([
      ['t1', expect.stringContaining('Not transferred: calls of this step have not answered yet (payer c1)')],
      ['c1', 'paid 5'],
      ['t2', 'Transferred to writer.'],
    ]);
    // one handoff, from the lead's second step, after the payer answered: the lead read both results
    expect(log.filter((e) => e.type === 'agent/handoff').map((e) => [e.step, e.payload.callId])).toEqual([[2, 't2']]);
    expect(leadModel.requests[1]!.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toHaveLength(2);
    expect(writerModel.requests).toHaveLength(1);
  });
});

describe('a handoff and the run budget', () => {
  const gated = defineTool({ name: 'pay', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
  const used = { inputTokens: 1, outputTokens: 10 };
  /** lead (maxOutputTokens 30) hands off to writer (1000), whose every step asks for a tool (the first needs approval): 10 tokens each. */
  function budgeted(writerFirst: ScriptedStep) {
    const writerModel = scriptedModel(
      [writerFirst, ...Array.from({ length: 8 }, (_, i) => ({ toolCalls: [{ id: `n${i}`, name: 'note', arguments: {} }], usage: used }))],
      { modelId: 'writer-model' },
    );
    const writer = defineAgent({
      name: 'writer',
      instructions: 'W',
      model: writerModel,
      tools: [note, gated],
      budget: { maxOutputTokens: 1000 },
    });
    const lead = defineAgent({
      name: 'lead',
      instructions: 'L',
      handoffs: [writer],
      budget: { maxOutputTokens: 30 },
      model: scriptedModel(
        [{ toolCalls: [{ id: 't1', name: 'transfer_to_writer', arguments: {} }], usage: { inputTokens: 1, outputTokens: 5 } }],
        { modelId: 'lead-model' },
      ),
    });
    return { lead, writerModel };
  }
  const exhaustedAt30 = { status: 'budget_exhausted', budget: 'maxOutputTokens', spending: { maxOutputTokens: { limit: '30' } } };

  it('a run keeps the budget it started with through a handoff, live and in the attempt after an approval', async () => {
    const live = budgeted({ toolCalls: [{ id: 'first', name: 'note', arguments: {} }], usage: used });
    const rt1 = createRuntime({ store: memoryStore(), model: scriptedModel([]), agents: [live.lead], config: { outputReserve: 10 } });
    cleanups.push(() => rt1.close());
    const r1 = await (await rt1.openSession('s', { agent: 'lead' })).run('go').result;
    expect(r1).toMatchObject(exhaustedAt30);

    const asked = budgeted({ toolCalls: [{ id: 'g1', name: 'pay', arguments: {} }], usage: used });
    const rt2 = createRuntime({ store: memoryStore(), model: scriptedModel([]), agents: [asked.lead], config: { outputReserve: 10 } });
    cleanups.push(() => rt2.close());
    const s = await rt2.openSession('s', { agent: 'lead' });
    expect((await s.run('go').result).status).toBe('suspended');
    const r2 = await (await s.approve('g1')).run!.result;
    // the respond's attempt runs as the writer, under the run's budget: the lead's 30, not the writer's 1000
    expect(r2).toMatchObject(exhaustedAt30);
  });

  it("a continue after a restart keeps the run's budget from before the handoff", async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const asked = budgeted({ toolCalls: [{ id: 'g1', name: 'pay', arguments: {} }], usage: used });
    const rt1 = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([]),
      agents: [asked.lead],
      config: { outputReserve: 10 },
    });
    const s1 = await rt1.openSession('s', { agent: 'lead' });
    expect((await s1.run('go').result).status).toBe('suspended');
    await rt1.close();
    const again = budgeted({ toolCalls: [{ id: 'x', name: 'note', arguments: {} }], usage: used });
    const rt2 = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([]),
      agents: [again.lead],
      config: { outputReserve: 10 },
    });
    cleanups.push(() => rt2.close());
    const s2 = await rt2.openSession('s');
    const r = await (await s2.approve('g1')).run!.result;
    expect(r).toMatchObject(exhaustedAt30);
    const starts = (await logOf(rt2.store, 's')).filter((e) => e.type === 'run/start').map((e) => e.payload.agent);
    expect(starts).toEqual(['lead', 'writer']);
  });
});
