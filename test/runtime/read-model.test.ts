import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, isValidationError, lmdbStore, memoryStore, scriptedModel } from '../../src/index.js';
import { collect } from '../helpers/drafts.js';
import { ids, lmdbRuntime } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// What a session exposes besides execute: stateContext, checkpoints, the view store and
// turnContexts.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const echo = defineTool({
  name: 'echo',
  description: '',
  mode: 'parallel',
  parameters: z.object({ t: z.string() }),
  execute: ({ t }) => t,
});

describe('stateContext and checkpoints', () => {
  it('stateContext persists with the session; loadCheckpoint installs a new surface base', async () => {
    const dir = tempDir();
    const model = scriptedModel(['a', 'b']);
    const rt = createRuntime({ store: lmdbStore({ path: dir.path }), model });
    const s = await rt.openSession('s');
    await s.setStateContext({ cart: ['apple'] });
    await s.execute({ kind: 'prompt', ...ids(), message: 'old conversation' });
    await s.loadCheckpoint({ messages: [{ role: 'user', content: 'restored context' }], stateContext: { cart: ['pear'] } });
    await rt.close();
    const rt2 = createRuntime({ store: lmdbStore({ path: dir.path }), model });
    const s2 = await rt2.openSession('s');
    expect(s2.stateContext).toEqual({ cart: ['pear'] });
    expect(s2.snapshot().messages.map((m) => m.content)).toEqual(['restored context']);
    await s2.execute({ kind: 'prompt', ...ids(), message: 'new' });
    expect(model.requests[1]!.messages.map((m) => m.content)).toEqual(['restored context', 'new']);
    await expect(s2.setStateContext(() => 1)).rejects.toSatisfy(isValidationError);
    await rt2.close();
    await dir.cleanup();
  });

  it('a checkpoint whose tool calls and results do not pair up is refused naming the message, with nothing written; the session runs on', async () => {
    const dir = tempDir();
    const store = lmdbStore({ path: dir.path });
    const model = scriptedModel(['ok'], { loop: true });
    const rt = createRuntime({ store, model });
    cleanups.push(async () => (await rt.close(), await dir.cleanup()));
    const s = await rt.openSession('s');
    const call = { id: 'c1', name: 'echo', arguments: '{}' };
    const bad: [string, Parameters<typeof s.loadCheckpoint>[0]['messages']][] = [
      [
        'messages.1.toolCallId',
        [
          { role: 'user', content: 'earlier' },
          { role: 'tool', content: 'x' },
        ],
      ],
      ['messages.0.toolCallId', [{ role: 'tool', content: 'x', toolCallId: 'nope' }]],
      ['messages.0.toolCalls.0', [{ role: 'assistant', content: '', toolCalls: [call] }]],
      [
        'messages.0.toolCalls.1.id',
        [
          { role: 'assistant', content: '', toolCalls: [call, call] },
          { role: 'tool', content: 'r', toolCallId: 'c1' },
        ],
      ],
    ];
    for (const [path, messages] of bad) {
      const error = await s.loadCheckpoint({ messages }).catch((e: unknown) => e);
      expect(isValidationError(error) && error.issues.map((i) => i.path.join('.')), path).toEqual([path]);
    }
    expect((await collect(store.readEvents('s'))).map((e) => e.type)).toEqual(['session/attached']);
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'hi' })).status).toBe('succeeded');
    expect(model.requests.at(-1)!.messages.map((m) => m.role)).toEqual(['user']);
  });
});

describe('view', () => {
  it('view is an @xstate/store store kept current from the events', async () => {
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { t: 'x' } }] }, 'final']),
      tools: [echo],
    });
    const s = await runtime.openSession('s');
    const seen: string[] = [];
    s.view.subscribe((snap) => seen.push(`${snap.context.status}:${snap.context.messages.length}`));
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const ctx = s.view.getSnapshot().context;
    expect(ctx.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(ctx.usage?.outputTokens).toBeGreaterThan(0);
    expect(seen.length).toBeGreaterThan(3);
  });
});

describe('turnContexts', () => {
  it('turnContexts holds a frozen context per run', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel(['a', 'b']), systemPrompt: 'be brief', tools: [echo] });
    const s = await runtime.openSession('s');
    const id = ids();
    await s.execute({ kind: 'prompt', ...id, message: 'q1' });
    const tc = s.turnContexts.get(id.runId)!;
    expect(tc).toMatchObject({
      modelId: 'scripted',
      systemPrompt: 'be brief',
      tools: ['echo'],
      policyRevision: runtime.executionProfileFingerprint,
    });
    expect(tc.messages.map((m) => m.content)).toEqual(['be brief', 'q1']);
    expect(Object.isFrozen(tc)).toBe(true);
  });

  // guarantees.md, turnContexts: "a map runId → the frozen context each run started from". A respond
  // (or continue) attempt calls start() again and replaces the run's entry with the surface at that
  // moment (here: the run's own assistant tool-call message appears in what it "started from").
  it('a respond attempt does not replace the frozen context its run started from', async () => {
    const pay = defineTool({ name: 'pay', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const rt = createRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }] }, 'ok']),
      tools: [pay],
      store: memoryStore(),
    });
    cleanups.push(() => rt.close());
    const s = await rt.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay it' });
    expect(r1.status).toBe('suspended');
    const started = s.turnContexts.get('r')!;
    expect(started.messages.map((m) => m.content)).toEqual(['pay it']);
    await s.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r1.pendingRequest!.questionId,
      answer: { decisions: { p1: 'approve' } },
    });
    expect(s.turnContexts.get('r')!.messages.map((m) => m.content)).toEqual(['pay it']);
  });
});
