import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel, type Envelope } from '../../src/index.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { ids, lmdbRuntime, logOf, sleep, storeWithAppend } from '../helpers/runtime.js';

// Envelopes announce committed log events: each carries its logSeq, and every step that starts
// ends with a step_end.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

const echo = defineTool({
  name: 'echo',
  description: '',
  mode: 'parallel',
  parameters: z.object({ t: z.string() }),
  execute: ({ t }) => t,
});

describe('every step that starts ends with a step_end', () => {
  it('a step whose tool calls are rejected ends with step_end carrying the logSeq of its step/end', async () => {
    const store = memoryStore();
    const rt = createRuntime({ store, model: scriptedModel([{ toolCalls: [{ name: 'nope', arguments: {} }] }, 'final']), tools: [echo] });
    const s = await rt.openSession('s');
    const envs: Envelope[] = [];
    s.events$.subscribe((e) => envs.push(e));
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r.status).toBe('succeeded');
    const stepEnds = (await logOf(store, 's')).filter((e) => e.type === 'step/end').map((e) => e.seq);
    expect(envs.filter((e) => e.event.type === 'step_start')).toHaveLength(2);
    expect(envs.filter((e) => e.event.type === 'step_end').map((e) => e.logSeq)).toEqual(stepEnds);
    await rt.close();
  });

  it('a blocked step ends with tool_end (skipped) and step_end envelopes', async () => {
    const deploy = defineTool({
      name: 'deploy',
      description: '',
      resources: ['prod'],
      parameters: z.object({}),
      execute: () => ({ kind: 'uncertain-hanging' as const, content: 'timed out' }),
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([
        { toolCalls: [{ name: 'deploy', arguments: {} }] },
        { toolCalls: [{ name: 'deploy', arguments: {} }] },
        'done',
      ]),
      tools: [deploy],
    });
    const s = await runtime.openSession('s');
    const envs: Envelope[] = [];
    s.events$.subscribe((e) => envs.push(e));
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'deploy' });
    expect(r.status).toBe('blocked');
    const log = await logOf(store, 's');
    const results = log.filter((e) => e.type === 'tool/result').map((e) => e.seq);
    expect(envs.filter((e) => e.event.type === 'tool_end').map((e) => e.logSeq)).toEqual(results);
    expect(envs.filter((e) => e.event.type === 'step_end').map((e) => e.logSeq)).toEqual(
      log.filter((e) => e.type === 'step/end').map((e) => e.seq),
    );
  });
});

describe('message_end announces a committed message', () => {
  // DESIGN §6: "an envelope for a committed log event also carries logSeq"; the product rule:
  // every transition is written to the log before its effect becomes visible
  it('message_end comes after its assistant/message is committed and carries its logSeq', async () => {
    const rt = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']),
      tools: [echo],
    });
    const s = await rt.openSession('s');
    const ends: Envelope[] = [];
    s.subscribe((e) => void (e.event.type === 'message_end' && ends.push(e)), { name: 'ends' });
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    const messages = (await logOf(rt.store, 's')).filter((e) => e.type === 'assistant/message');
    expect(ends.map((e) => e.logSeq)).toEqual(messages.map((m) => m.seq));
    await rt.close();
  });

  it('a message whose commit fails is never announced as a message_end', async () => {
    const inner = memoryStore();
    let failed = false;
    const store = storeWithAppend(inner, async (id, epoch, seq, drafts) => {
      if (!failed && drafts.some((d) => d.type === 'assistant/message')) {
        failed = true;
        throw new Error('disk hiccup');
      }
      return inner.append(id, epoch, seq, drafts);
    });
    const rt = createRuntime({ store, model: scriptedModel(['the answer']) });
    const s = await rt.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type), { name: 'all' });
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    expect(r.status).toBe('failed');
    expect(seen).not.toContain('message_end');
    await rt.close();
  });
});

describe('logSeq', () => {
  it('tool_start carries the seq of its tool/call, execution_finished the seq of its run/end', async () => {
    const rt = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']),
      tools: [echo],
    });
    const s = await rt.openSession('s');
    const seen: Envelope[] = [];
    s.subscribe((e) => void seen.push(e), { name: 'all' });
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(5);
    const log = await logOf(rt.store, 's');
    const call = log.find((e) => e.type === 'tool/call')!;
    const end = log.find((e) => e.type === 'run/end')!;
    expect(seen.find((e) => e.event.type === 'tool_start')?.logSeq).toBe(call.seq);
    expect(seen.find((e) => e.event.type === 'execution_finished')?.logSeq).toBe(end.seq);
    await rt.close();
  });

  // docs/architecture.md: "An envelope that announces a log event goes out once that event is committed,
  // with its logSeq: ... tool_start with its tool/call's seq". env.callSeqs is only filled by commits of
  // this process, so a call whose tool/call was committed before a restart starts without a logSeq.
  it('tool_start of a parallel call re-run by continue in a new process carries its tool/call logSeq', async () => {
    const db = lmdbPath();
    let release!: () => void;
    const hang = new Promise<void>((r) => (release = r));
    const look = defineTool({
      name: 'look',
      description: 'read only',
      mode: 'parallel',
      parameters: z.object({}),
      execute: async () => {
        await hang;
        return 'seen';
      },
    });
    const rt1 = db.rt({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] }]), tools: [look] });
    const s1 = await rt1.openSession('s');
    const p = s1.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    for (let i = 0; i < 100 && !(await logOf(rt1.store, 's')).some((e) => e.type === 'tool/call'); i++) await sleep(10);
    await rt1.close();
    release();
    expect((await p).status).toBe('detached');
    const look2 = defineTool({ name: 'look', description: 'read only', mode: 'parallel', parameters: z.object({}), execute: () => 'seen' });
    const rt2 = db.rt({ model: scriptedModel(['done']), tools: [look2] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.uncertainToolCalls.map((c) => c.resolution)).toEqual(['rerun']);
    const seen: Envelope[] = [];
    s2.subscribe((e) => void seen.push(e), { required: true });
    expect((await s2.execute({ kind: 'continue', runId: 'r1', attemptId: 'a2' })).status).toBe('succeeded');
    const callSeq = (await logOf(rt2.store, 's')).find((e) => e.type === 'tool/call')!.seq;
    const start = seen.find((e) => e.event.type === 'tool_start');
    expect(start?.logSeq).toBe(callSeq);
  });
});
