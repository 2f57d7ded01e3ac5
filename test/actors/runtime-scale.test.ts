import { existsSync } from 'node:fs';
import { getEventListeners } from 'node:events';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type EventStore,
  type Envelope,
  type ModelProvider,
} from '../../src/index.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function tmpStore() {
  const dir = tempDir();
  const store = lmdbStore({ path: dir.path });
  cleanups.push(async () => {
    await store.close().catch(() => undefined);
    await dir.cleanup();
  });
  return { store, path: dir.path };
}

describe('runtime: option validation', () => {
  it('a bad killSwitch is refused before the default LMDB store is opened (nothing opened)', () => {
    const dir = tempDir();
    const cwd = process.cwd();
    process.chdir(dir.path);
    try {
      expect(() => createRuntime({ model: scriptedModel(['x']), killSwitch: 42 as never })).toThrow(/killSwitch/);
      // the refused runtime must not have created (and left open) ./.actorloop
      expect(existsSync(join(dir.path, '.actorloop'))).toBe(false);
    } finally {
      process.chdir(cwd);
      void dir.cleanup();
    }
  });
});

describe('runtime: close', () => {
  it('a second runtime.close() made while the first is closing resolves only once the store is closed', async () => {
    const { store } = tmpStore();
    let storeClosed = false;
    const slowStore: EventStore = Object.assign(Object.create(store) as EventStore, {
      append: store.append.bind(store),
      attachWriter: store.attachWriter.bind(store),
      readEvents: store.readEvents.bind(store),
      loadSurface: store.loadSurface.bind(store),
      getHead: store.getHead.bind(store),
      getEventById: store.getEventById.bind(store),
      listSessions: store.listSessions.bind(store),
      events$: store.events$.bind(store),
      close: async () => {
        await sleep(100);
        await store.close();
        storeClosed = true;
      },
    });
    const rt = createRuntime({ model: scriptedModel(['x']), store: slowStore });
    await rt.openSession('s');
    const first = rt.close();
    const second = rt.close();
    await second;
    const closedWhenSecondResolved = storeClosed;
    await first;
    expect(closedWhenSecondResolved).toBe(true);
  });

  it('runtime.close() made while an openSession is attaching leaves no live session behind', async () => {
    const { store } = tmpStore();
    let rt!: ReturnType<typeof createRuntime>;
    const hooked: EventStore = {
      attachWriter: (id) => store.attachWriter(id),
      append: async (...args) => {
        const out = await store.append(...args);
        // runtime.close() is called (and completes) while openSession waits for session/attached
        if (args[3].some((d) => d.type === 'session/attached')) await rt.close();
        return out;
      },
      readEvents: (id, r) => store.readEvents(id, r),
      loadSurface: (id) => store.loadSurface(id),
      getHead: (id) => store.getHead(id),
      getEventById: (id, e) => store.getEventById(id, e),
      listSessions: () => store.listSessions(),
      events$: (id, o) => store.events$(id, o),
      close: () => store.close(),
    };
    rt = createRuntime({ model: scriptedModel(['x']), store: hooked });
    const got = await rt.openSession('late').catch((e: unknown) => e);
    if (got instanceof Error) return; // refused: fine
    const s = got as import('../../src/index.js').ExecutionSession;
    // runtime.close() has resolved ("closes every session, then the store"), yet this session is live
    expect(s.actor.getSnapshot().status).toBe('stopped');
  });
});

describe('runtime: kill switch signal', () => {
  it('runtime.close() removes its abort listener from a shared kill-switch AbortSignal', async () => {
    const ac = new AbortController();
    const before = getEventListeners(ac.signal, 'abort').length;
    for (let i = 0; i < 50; i++) {
      const rt = createRuntime({ model: scriptedModel(['x']), store: memoryStore(), killSwitch: ac.signal });
      await rt.close();
    }
    expect(getEventListeners(ac.signal, 'abort').length - before).toBe(0);
  });
});

describe('envelopes: DESIGN §6 fields', () => {
  it('every envelope of a committed log event carries its logSeq', async () => {
    const { store } = tmpStore();
    const echo = defineTool({ name: 'echo', description: '', mode: 'parallel', parameters: z.object({}), execute: () => 'ok' });
    const rt = createRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: {} }] }, 'done']), tools: [echo], store });
    cleanups.push(() => rt.close());
    const s = await rt.openSession('s');
    const seen: Envelope[] = [];
    s.events$.subscribe((e) => seen.push(e));
    await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    const log = await logOf(store, 's');
    const runStart = log.find((e) => e.type === 'run/start')!;
    const env = seen.find((e) => e.event.type === 'run_start')!;
    // run_start is published after run/start is committed: it is the envelope of a committed event
    expect(env.logSeq).toBe(runStart.seq);
  });
});

describe('session.close(): no writes after close', () => {
  it('a model call that outlives session.close() writes nothing to the log afterwards', async () => {
    const { store } = tmpStore();
    const echo = defineTool({
      name: 'echo',
      description: '',
      mode: 'exclusive',
      resources: ['db'],
      parameters: z.object({}),
      execute: () => 'ok',
    });
    // a provider that does not look at its AbortSignal (answers after 150 ms whatever happens)
    const model: ModelProvider = {
      modelId: 'deaf',
      call: async () => {
        await sleep(150);
        return {
          message: { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'echo', arguments: '{}' }] },
          finishReason: 'tool_calls',
          usage: { inputTokens: 1, outputTokens: 1 },
        };
      },
    };
    const rt = createRuntime({ model, tools: [echo], store });
    cleanups.push(() => rt.close());
    const s = await rt.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await sleep(30);
    await s.close();
    expect(await running).toMatchObject({ status: 'detached' });
    const atClose = (await logOf(store, 's')).map((e) => e.type);
    await sleep(400);
    const later = (await logOf(store, 's')).map((e) => e.type);
    expect(later.slice(atClose.length)).toEqual([]);
  });
});

describe('many sessions in one runtime', () => {
  it('50 sessions running in parallel on one LMDB store share disk flushes (group commit)', async () => {
    const { store } = tmpStore();
    // a model with a little latency, as every real one has: sessions no longer append in lockstep
    const model: ModelProvider = {
      modelId: 'latency',
      call: async () => {
        await sleep(1);
        return { message: { role: 'assistant', content: 'ok' }, finishReason: 'stop' };
      },
    };
    const rt = createRuntime({ model, store });
    cleanups.push(() => rt.close());
    const sessions = await Promise.all(Array.from({ length: 50 }, (_, i) => rt.openSession(`s${i}`)));
    const stats = (store as unknown as { stats: { commits: number; flushes: number; appends: number } }).stats;
    const before = { ...stats };
    const results = await Promise.all(
      sessions.map(async (s, i) => {
        for (let k = 0; k < 4; k++) await s.execute({ kind: 'prompt', runId: `s${i}-r${k}`, attemptId: 'a', message: 'hi' });
        return s.snapshot().messages.length;
      }),
    );
    expect(results).toEqual(results.map(() => 8));
    const appends = stats.appends - before.appends;
    const flushes = stats.flushes - before.flushes;
    // 50 sessions with work in flight at once: appends must share flushes
    expect({ appends, flushes, appendsPerFlush: Math.round((appends / flushes) * 100) / 100 }).toMatchObject({
      appendsPerFlush: expect.toSatisfy((x: number) => x >= 2),
    });
  });

  it('300 runs in one session: turnContexts are views of the shared history (no copy per run until read), each as its run started', async () => {
    const { store } = tmpStore();
    const model: ModelProvider = {
      modelId: 'm',
      call: async () => ({ message: { role: 'assistant', content: 'ok' }, finishReason: 'stop' }),
    };
    const rt = createRuntime({ model, store });
    cleanups.push(() => rt.close());
    const s = await rt.openSession('s');
    for (let k = 0; k < 300; k++) await s.execute({ kind: 'prompt', runId: `r${k}`, attemptId: 'a', message: 'hi' });
    const history = s.snapshot().messages.length; // 600
    expect(history).toBe(600);
    // each context is a view of the shared history (a reference and a length), copied on first read:
    // nothing is copied per run until a context is read
    const ctx = s.turnContexts.get('r10')!;
    expect(typeof Object.getOwnPropertyDescriptor(ctx, 'messages')!.get).toBe('function');
    // and it shows the history as it was when that run started, plus its own prompt
    expect(ctx.messages).toHaveLength(2 * 10 + 1);
    expect(ctx.messages.at(-1)).toMatchObject({ role: 'user', content: 'hi' });
    expect(s.turnContexts.get('r299')!.messages).toHaveLength(2 * 299 + 1);
    expect(Object.isFrozen(ctx.messages)).toBe(true);
  });
});
