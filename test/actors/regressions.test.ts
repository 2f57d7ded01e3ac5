import Anthropic from '@anthropic-ai/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anthropicModel, createRuntime, defineTool, lmdbStore, scriptedModel, ValidationError } from '../../src/index.js';
import type { Message } from '../../src/contracts/message.js';
import type { ModelProvider, ModelRequest, ModelResponse } from '../../src/contracts/model.js';
import { deferred } from '../helpers/drafts.js';
import { ids, lmdbRuntime, logOf, sleep } from '../helpers/runtime.js';
import { an, startAnthropicServer } from '../providers/anthropic-server.js';
import type { ScriptedServer } from '../providers/sse-server.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

/** Every assistant tool call in `messages` is answered by a tool message with its id. */
function unansweredCalls(messages: readonly Message[]): string[] {
  const answered = new Set(messages.filter((m) => m.role === 'tool').map((m) => m.toolCallId));
  return messages.flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []).map((c) => c.id) : [])).filter((id) => !answered.has(id));
}

describe('run engine fixes: second look (real LMDB)', () => {
  it('a cancel arriving while a model step asks for approval leaves no unanswered tool calls on the surface', async () => {
    const gate = deferred();
    const requests: ModelRequest[] = [];
    let n = 0;
    // a provider whose response was already complete when the cancel came (it does not abort)
    const model: ModelProvider = {
      modelId: 'm',
      async call(req): Promise<ModelResponse> {
        requests.push({ ...req, messages: [...req.messages] });
        n++;
        if (n === 1) {
          await gate.promise;
          return { message: { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'deploy', arguments: '{}' }] }, finishReason: 'tool_calls' };
        }
        return { message: { role: 'assistant', content: 'ok' }, finishReason: 'stop' };
      },
    };
    const deploy = defineTool({ name: 'deploy', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'deployed' });
    const { runtime } = lmdbRuntime({ model, tools: [deploy] });
    const s = await runtime.openSession('s');
    const p = s.execute({ kind: 'prompt', ...ids(), message: 'deploy' });
    while (n === 0) await sleep(5);
    expect(await s.requestCancel()).toBe(true);
    gate.resolve();
    const r = await p;
    expect(r.status).toBe('cancelled');
    // the run is settled: nothing will ever answer c1, yet the model sees the call on the next run
    await s.execute({ kind: 'prompt', ...ids(), message: 'next' });
    expect(unansweredCalls(requests[1]!.messages)).toEqual([]);
  });

  it('a follow-up submitted while a prompt with the same runId is starting is refused, not failed later', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel(['first', 'second']) });
    const s = await runtime.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'X', attemptId: 'a1', message: 'go' });
    const sub = s.submitInput({ inputId: 'X', mode: 'follow_up', message: 'more' });
    const outcome = await sub.then(
      (receipt) => ({ receipt }),
      (e: unknown) => ({ error: e }),
    );
    const r = await p;
    expect(r.status).toBe('succeeded');
    await s.waitForIdle();
    const followUpEnd = (await logOf(runtime.store, 's')).find((e) => e.type === 'run/end' && e.payload.attemptId === 'X');
    // either the runId is refused up front (DESIGN: a run id names one run) or the follow-up runs;
    // it must not be accepted durably and then fail on the run/start id it can never write
    const refused = 'error' in outcome && outcome.error instanceof ValidationError;
    expect(refused ? 'refused' : `accepted, follow-up run ${String(followUpEnd?.payload.status)}`).toMatch(/^(refused|accepted, follow-up run succeeded)$/);
  });

  it('continuing after a crash counts a re-run parallel call once against maxToolCalls', async () => {
    const dir = (await import('../helpers/tmp.js')).tempDir();
    cleanups.push(dir.cleanup);
    let hang = true;
    const fetchTool = defineTool({
      name: 'fetch',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: () => (hang ? new Promise<string>(() => {}) : 'body'),
    });
    const a = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([{ toolCalls: [{ id: 'f1', name: 'fetch', arguments: {} }] }]),
      tools: [fetchTool],
      budget: { maxToolCalls: 2 },
    });
    const s1 = await a.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    while (!(await logOf(a.store, 's')).some((e) => e.type === 'tool/call')) await sleep(5);
    await a.close(); // the process "dies" with the parallel call announced and unanswered
    hang = false;
    const b = createRuntime({ store: lmdbStore({ path: dir.path }), model: scriptedModel(['done']), tools: [fetchTool], budget: { maxToolCalls: 2 } });
    cleanups.unshift(() => b.close());
    const s2 = await b.openSession('s');
    expect(s2.recovery.interruptedRuns.length).toBe(1);
    const r = await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    // the model asked for one call; the run without a crash uses 1 of 2 and succeeds
    expect({ status: r.status, toolCalls: r.toolCalls }).toEqual({ status: 'succeeded', toolCalls: 1 });
  });

  it('execute returns the recorded result of an attempt that finished suspended even if the session closes right then', async () => {
    const deploy = defineTool({ name: 'deploy', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'ok' });
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'deploy', arguments: {} }] }]), tools: [deploy] });
    const s = await runtime.openSession('s');
    // the runtime closes at the moment the attempt finished (e.g. runtime.close() on shutdown)
    const sub = s.actor.subscribe((snap) => snap.matches('finalizing') && (sub.unsubscribe(), void s.close()));
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'deploy' });
    const recorded = (await logOf(runtime.store, 's')).find((e) => e.type === 'run/end')!.payload.result as { status: string };
    expect(recorded.status).toBe('suspended');
    // DESIGN §6: the attempt's result is the recorded one (its pendingRequest included)
    expect({ status: r.status, pending: r.pendingRequest?.kind }).toEqual({ status: 'suspended', pending: 'approval' });
  });

  it("a prompt reusing a runId from a log written before run-open ids is refused", async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel(['again']) });
    // a settled run as the previous version wrote it: its first run/start under run-start:<runId>:<attemptId>
    const { writerEpoch, lastSeq } = await store.attachWriter('s');
    await store.append('s', writerEpoch, lastSeq + 1, [
      { eventId: 'run-start:X:a1', type: 'run/start', turn: 1, step: 0, attempt: 1, surfaceOp: 'none', payload: { runId: 'X', attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f' } },
      { type: 'user/message', turn: 1, step: 0, attempt: 1, surfaceOp: 'append', payload: { message: { role: 'user', content: 'hi' } } },
      { type: 'assistant/message', turn: 1, step: 1, attempt: 1, surfaceOp: 'append', payload: { message: { role: 'assistant', content: 'hello' }, finishReason: 'stop', latencyMs: 1 } },
      {
        eventId: 'run-end:X:a1',
        type: 'run/end',
        turn: 1,
        step: 1,
        attempt: 1,
        surfaceOp: 'none',
        payload: { runId: 'X', attemptId: 'a1', status: 'succeeded', outcome: 'completed', result: { runId: 'X', attemptId: 'a1', status: 'succeeded', outcome: 'completed' } },
      },
    ]);
    const s = await runtime.openSession('s');
    await expect(s.execute({ kind: 'prompt', runId: 'X', attemptId: 'a2', message: 'again' })).rejects.toThrow(ValidationError);
  });
});

describe('run engine fixes: logs written before them', () => {
  it('an input cancelled in a log written before input-cancelled ids is reported cancelled after a reopen', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([]) });
    const { writerEpoch, lastSeq } = await store.attachWriter('s');
    await store.append('s', writerEpoch, lastSeq + 1, [
      { eventId: 'input:I', type: 'input/accepted', turn: 0, step: 0, attempt: 0, surfaceOp: 'none', payload: { inputId: 'I', mode: 'follow_up', messages: [{ role: 'user', content: 'later' }] } },
      // the previous version wrote input/cancelled with a generated id
      { type: 'input/cancelled', turn: 0, step: 0, attempt: 0, surfaceOp: 'none', payload: { inputId: 'I' } },
    ]);
    const s = await runtime.openSession('s');
    expect((await s.submitInput({ inputId: 'I', mode: 'follow_up', message: 'later' })).status).toBe('cancelled');
  });
});

describe('run engine fixes: providers', () => {
  let server: ScriptedServer;
  beforeAll(async () => void (server = await startAnthropicServer()));
  afterAll(() => server.close());

  it("keeps Anthropic's max_tokens above the thinking budget when the run's maxOutputTokens caps the call", async () => {
    server.reset();
    server.reply(an.textReply(['ok']));
    const model = anthropicModel({
      client: new Anthropic({ apiKey: 'test', baseURL: server.baseURL }),
      model: 'claude-test',
      maxTokens: 8192,
      thinking: { type: 'enabled', budget_tokens: 4096 },
    });
    const { runtime } = lmdbRuntime({ model, budget: { maxOutputTokens: 2000 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'hi' });
    const body = server.requests[0]!.body as { max_tokens: number; thinking: { budget_tokens: number } };
    // the Messages API refuses a request whose max_tokens is not greater than thinking.budget_tokens
    expect(body.max_tokens).toBeGreaterThan(body.thinking.budget_tokens);
  });
});
