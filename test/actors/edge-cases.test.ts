import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, memoryStore, scriptedModel, ValidationError, type ExecutionSession } from '../../src/index.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import { ids, lmdbRuntime, logOf, sleep, storeWithAppend } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

/** Resolves with `p`, or with 'still pending' after `ms`. */
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => 'still pending' as const)]);

describe('run engine edge cases (real LMDB)', () => {
  it('execute settles with a result when the session is closed mid-run', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'slow answer', delayMs: 5_000 }]) });
    const s = await runtime.openSession('s');
    const p = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(100); // the model call is under way
    await s.close();
    // DESIGN §6: execute rejects only for bad input / ExecutionBusy; everything else is a result
    expect(await within(p, 2_000)).not.toBe('still pending');
  });

  it('a cancelled run starts no queued tool call', async () => {
    const started: string[] = [];
    const fetchTool = defineTool({
      name: 'fetch',
      description: '',
      mode: 'parallel',
      parameters: z.object({ url: z.string() }),
      // a well-behaved tool: it honours its signal
      execute: ({ url }, ctx) => {
        started.push(url);
        return new Promise<string>((resolve, reject) => {
          if (ctx.signal.aborted) return reject(new Error('aborted before start'));
          const t = setTimeout(() => resolve(`body of ${url}`), 5_000);
          ctx.signal.addEventListener('abort', () => (clearTimeout(t), reject(new Error('aborted'))), { once: true });
        });
      },
    });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'fetch', arguments: { url: 'a' } }, { name: 'fetch', arguments: { url: 'b' } }] }, 'done']),
      tools: [fetchTool],
      config: { maxParallelTools: 1 },
    });
    const s = await runtime.openSession('s');
    const p = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    while (started.length === 0) await sleep(5);
    expect(await s.requestCancel()).toBe(true);
    const r = await p;
    expect(r.status).toBe('cancelled');
    // call b was only queued when the cancel came: it must not be started after the cancel
    expect(started).toEqual(['a']);
  });

  it('an uncertain-hanging outcome returned by a tool locks the call\'s declared resources', async () => {
    let runs = 0;
    const deploy = defineTool({
      name: 'deploy',
      description: '',
      resources: ['prod'],
      parameters: z.object({}),
      execute: () => {
        runs++;
        return { kind: 'uncertain-hanging' as const, content: 'the deploy API timed out; it may still be rolling out' };
      },
    });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'deploy', arguments: {} }] }, { toolCalls: [{ name: 'deploy', arguments: {} }] }, 'done']),
      tools: [deploy],
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'deploy' });
    // DESIGN §2: "resourceLocks are always the call's declared resources"; §4.5: a call needing a
    // resource held by an uncertain-hanging lock is not run, the run ends `blocked`
    expect(runs).toBe(1);
    expect(r).toMatchObject({ status: 'blocked', blockedBy: ['prod'] });
  });

  it('calls naming the same resource never overlap, even when one of them hangs past its timeout', async () => {
    let active = 0;
    let maxActive = 0;
    const write = defineTool({
      name: 'write',
      description: '',
      mode: 'parallel',
      resources: ['file'],
      timeoutMs: 20,
      parameters: z.object({ n: z.number() }),
      // ignores its signal (e.g. a blocking client): keeps running for 300 ms
      execute: async ({ n }) => {
        active++;
        maxActive = Math.max(maxActive, active);
        await sleep(n === 1 ? 300 : 10);
        active--;
        return 'written';
      },
    });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'write', arguments: { n: 1 } }, { name: 'write', arguments: { n: 2 } }] }, 'done']),
      tools: [write],
      config: { cancelGraceMs: 20 },
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(350);
    expect(maxActive).toBe(1);
  });

  it('a timeoutMs or cancelGraceMs longer than Node.js can time is refused with a ValidationError (not run at once)', async () => {
    // Node.js runs a timer longer than 2^31−1 ms after 1 ms: such a timeout would abort the tool at once
    const slow = { name: 'slow', description: '', timeoutMs: 2 ** 31, parameters: z.object({}), execute: () => 'finished' };
    expect(() => defineTool(slow)).toThrow(ValidationError);
    expect(() => defineTool(slow)).toThrow(/2147483647/);
    expect(defineTool({ ...slow, timeoutMs: 2 ** 31 - 1 }).timeoutMs).toBe(2 ** 31 - 1);
    expect(() => createRuntime({ store: memoryStore(), model: scriptedModel(['x']), config: { cancelGraceMs: 2 ** 31 } })).toThrow(ValidationError);
  });

  it('a cancel that races the end of a run does not cancel the follow-up run started after it', async () => {
    const dir = tempDir();
    const inner = lmdbStore({ path: dir.path });
    let session: ExecutionSession | undefined;
    let fired = false;
    const store = storeWithAppend(inner, (id, epoch, seq, drafts) => {
      // the user cancels run A just as A's run/end is being committed
      if (!fired && drafts.some((d) => d.type === 'run/end' && d.payload.runId === 'A')) {
        fired = true;
        void session!.requestCancel();
      }
      return inner.append(id, epoch, seq, drafts);
    });
    const runtime = createRuntime({ store, model: scriptedModel([{ text: 'answer A', delayMs: 100 }, { text: 'answer B', delayMs: 200 }]) });
    cleanups.push(async () => {
      await runtime.close();
      await dir.cleanup();
    });
    session = await runtime.openSession('s');
    const results: ExecutionResult[] = [];
    session.events$.subscribe((e) => {
      if (e.event.type === 'execution_finished') results.push((e.event as { result: ExecutionResult }).result);
    });
    const a = session.execute({ kind: 'prompt', runId: 'A', attemptId: 'A1', message: 'first' });
    await sleep(20);
    await session.submitInput({ inputId: 'B', message: 'second', mode: 'follow_up' });
    await a;
    await session.waitForIdle();
    expect(fired).toBe(true);
    expect(results.find((r) => r.runId === 'B')).toMatchObject({ status: 'succeeded', finalMessage: 'answer B' });
  });

  it('compaction never leaves a tool result without the assistant message that called it', async () => {
    const big = 'x'.repeat(2000); // ≈ 500 tokens
    const deploy = defineTool({ name: 'deploy', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'y'.repeat(4000) });
    const model = scriptedModel(['ok', { toolCalls: [{ name: 'deploy', arguments: {} }] }, 'SUMMARY', 'deployed']);
    const { runtime } = lmdbRuntime({ model, tools: [deploy], config: { contextWindow: 1500, outputReserve: 200 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: big });
    const id = ids();
    const r = await s.execute({ kind: 'prompt', ...id, message: 'deploy it' });
    expect(r.status).toBe('suspended');
    const pr = r.pendingRequest as { questionId: string; calls: { callId: string }[] };
    const r2 = await s.execute({ kind: 'respond', runId: id.runId, attemptId: 'resp', questionId: pr.questionId, answer: { decisions: { [pr.calls[0]!.callId]: 'approve' } } });
    expect(r2.status).toBe('succeeded');
    expect(model.requests[2]!.messages[0]!.content).toContain('Summarise'); // a compaction happened
    const after = model.requests[3]!.messages;
    // every tool message follows an assistant message that asked for that call (providers refuse otherwise)
    const asked = new Set<string>();
    for (const m of after) {
      for (const c of m.toolCalls ?? []) asked.add(c.id);
      if (m.role === 'tool') expect(asked.has(m.toolCallId!)).toBe(true);
    }
  });

  it('a prompt reusing the runId of an earlier run is refused, so two runs never share a finalMessageId', async () => {
    const delivered: { id: string; content: string }[] = [];
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel(['first answer', 'second answer']),
      delivery: { idempotent: true, deliver: async (f) => void delivered.push({ id: f.finalMessageId, content: f.content }) },
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'one' });
    // an idempotent owner may de-duplicate on finalMessageId alone: a second run named r would collide
    await expect(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a2', message: 'two' })).rejects.toThrow(ValidationError);
    await expect(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a2', message: 'two' })).rejects.toThrow(/run r already exists/);
    // nothing was written for the refused prompt; the recorded attempt still answers
    expect((await logOf(store, 's')).filter((e) => e.type === 'run/start')).toHaveLength(1);
    expect(await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'one' })).toMatchObject({ status: 'succeeded', finalMessage: 'first answer' });
    const r2 = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'two' });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'second answer' });
    expect(delivered.map((d) => d.content)).toEqual(['first answer', 'second answer']);
    expect(new Set(delivered.map((d) => d.id)).size).toBe(2);
  });

  it('re-executing an interrupted attempt after the run settled through a continue returns the run\'s settled result', async () => {
    const dir = tempDir();
    const hangingModel = { modelId: 'm', call: () => new Promise<never>(() => {}) };
    const rt1 = createRuntime({ model: hangingModel, store: lmdbStore({ path: dir.path }) });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'hi' });
    await sleep(100); // run/start is durable, the model call hangs: rt1 is abandoned (a crash)
    const rt2 = createRuntime({ model: scriptedModel(['the answer']), store: lmdbStore({ path: dir.path }) });
    cleanups.push(async () => {
      await rt2.close();
      await dir.cleanup();
    });
    const s2 = await rt2.openSession('s');
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({ status: 'succeeded', finalMessage: 'the answer' });
    // DESIGN §6: "if that attempt was interrupted and the run has settled since (through a
    // continue), the run's settled result"
    const again = await s2.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'hi' });
    expect(again).toMatchObject({ status: 'succeeded', finalMessage: 'the answer' });
  });

  it('a pricing function returning something other than a decimal string fails the run as a result, with run/end written', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ text: 'hi', usage: { inputTokens: 1, outputTokens: 1 } }]), pricing: () => '1e-7', budget: { maxCost: '1' } });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'failed', outcome: 'failed', error: { kind: 'execution' } });
    expect(r.error!.message).toMatch(/pricing returned "1e-7"/);
    const log = await logOf(store, 's');
    expect(log.at(-1)).toMatchObject({ type: 'run/end', payload: { status: 'failed' } });
  });

  it('a recorded attempt executed again while another run is in progress returns its recorded result, not ExecutionBusy', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel(['first answer', { text: 'slow second', delayMs: 300 }]) });
    const s = await runtime.openSession('s');
    const first = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' });
    const second = s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'two' });
    await sleep(50);
    // a retry of r1 (its caller lost the answer) runs nothing, so it need not wait for r2
    expect(await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' })).toEqual(first);
    // the attempt in progress itself, or a new one, is still busy
    await expect(s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'two' })).rejects.toThrow(/busy/i);
    await expect(s.execute({ kind: 'prompt', runId: 'r3', attemptId: 'a1', message: 'three' })).rejects.toThrow(/busy/i);
    expect(await second).toMatchObject({ status: 'succeeded', finalMessage: 'slow second' });
  });
});
