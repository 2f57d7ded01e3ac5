import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  isStoreClosedError,
  isValidationError,
  memoryStore,
  type EventStore,
  type Runtime,
  type ServeEvent,
  type ServeHandle,
} from '../../src/index.js';
import { toolLoopModel } from '../helpers/serve-model.js';
import { logOf, sleep } from '../helpers/runtime.js';
import { scaled } from '../helpers/load.js';
import { serve } from '../../src/runtime/serve.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';

// runtime.serve: leases, fencing, shutdown and the kill switch, in one process on the memory
// store (the same rules run across processes on LMDB and PostgreSQL: test/crash/serve-faults).

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A slow exclusive tool: each call records its start and takes `ms` (or until aborted). */
function slowCharge(ms: number, started: string[]) {
  return defineTool({
    name: 'charge',
    description: '',
    parameters: z.object({ key: z.string() }),
    mode: 'exclusive',
    execute: async ({ key }, ctx) => {
      started.push(key);
      await new Promise((r) => {
        const t = setTimeout(r, ms);
        ctx.signal.addEventListener('abort', () => (clearTimeout(t), r(undefined)), { once: true });
      });
      return `charged ${key}`;
    },
  });
}

function make(store: EventStore, started: string[], toolMs: number, options: Partial<Parameters<typeof createRuntime>[0]> = {}): Runtime {
  const runtime = createRuntime({
    store,
    model: toolLoopModel({ steps: 3, toolsPerStep: 1, tools: ['charge'] }),
    tools: [slowCharge(toolMs, started)],
    ...options,
  });
  cleanups.push(() => runtime.close());
  return runtime;
}

const until = async (pred: () => boolean | Promise<boolean>, ms = 10_000) => {
  const end = Date.now() + scaled(ms);
  while (!(await pred())) {
    if (Date.now() > end) throw new Error('timed out');
    await sleep(10);
  }
};

describe('runtime.serve', () => {
  it('stop() refuses a negative or non-number graceMs and unknown keys with ValidationError, and still stops when asked right', async () => {
    const runtime = make(memoryStore(), [], 10);
    const handle = runtime.serve({ concurrency: 1, leaseMs: 5000, pollMs: 20 });
    for (const bad of [{ graceMs: -5 }, { graceMs: 'x' }, { grace: 5 }]) {
      const err = await handle.stop(bad as never).catch((e) => e);
      expect(isValidationError(err), `${JSON.stringify(bad)}: ${String(err)}`).toBe(true);
    }
    await handle.stop({ graceMs: 0 });
  });

  it('serve after runtime.close() throws StoreClosedError, as openSession, run and submit refuse then', async () => {
    const runtime = make(memoryStore(), [], 10);
    await runtime.close();
    let handle: ServeHandle | undefined;
    const err = (() => {
      try {
        handle = runtime.serve({ pollMs: 20 });
      } catch (e) {
        return e;
      }
    })();
    expect(isStoreClosedError(err), String(err)).toBe(true);
    expect(handle).toBeUndefined();
    await expect(runtime.openSession('s')).rejects.toSatisfy(isStoreClosedError);
  });

  it('a worker whose registration fails (its store closed under the runtime) reports the error and stops, never started', async () => {
    const store = memoryStore();
    const runtime = make(store, [], 10);
    await store.close();
    const handle = runtime.serve({ pollMs: 20 });
    const events: ServeEvent[] = [];
    handle.subscribe((e) => events.push(e));
    await handle.closed;
    expect(events.map((e) => e.type)).toEqual(['error', 'stopped']);
    expect(events[0]).toMatchObject({ message: expect.stringMatching(/^registering the worker failed: .*is closed; the worker stops$/) });
  });

  it('graceful stop asks a running session to stop after its tool round and releases the lease', async () => {
    const store = memoryStore();
    const started: string[] = [];
    const runtime = make(store, started, 300);
    const handle = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20, shutdownGraceMs: 10_000 });
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === 1);
    await handle.stop();
    const result = await runtime.waitForResult('s', 'r', { signal: AbortSignal.timeout(5000) });
    expect(result.status).toBe('stopped');
    expect(started).toHaveLength(1); // stopped after the first round
    expect((await store.work!.listLeases()).filter((l) => l.workerId !== null)).toEqual([]);
  });

  it("shutdown 'detach' leaves the run open, released for the next worker, which finishes it", async () => {
    const store = memoryStore();
    const started: string[] = [];
    const first = make(store, started, 400);
    const h1 = first.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20, shutdown: 'detach' });
    const events: ServeEvent[] = [];
    h1.subscribe((e) => events.push(e));
    await first.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === 1);
    await h1.stop();
    expect(events.find((e) => e.type === 'released')).toMatchObject({ sessionId: 's', resume: true });
    expect((await store.getHead('s'))!.openRun?.runId).toBe('r');
    const second = make(store, started, 10);
    const h2 = second.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    const seen: ServeEvent[] = [];
    h2.subscribe((e) => seen.push(e));
    const result = await second.waitForResult('s', 'r', { signal: AbortSignal.timeout(10_000), pollMs: 20 });
    expect(result.status).toBe('succeeded');
    expect(seen.find((e) => e.type === 'resumed')).toMatchObject({ sessionId: 's', runId: 'r' });
    await h2.stop();
  });

  it('a claim given back unbound (the session could not be opened) keeps the open run marked for the next worker, says so in its `released`, and the next worker finishes it', async () => {
    const store = memoryStore();
    const started: string[] = [];
    const first = make(store, started, 400);
    const h1 = first.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20, shutdown: 'detach' });
    await first.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === 1);
    await h1.stop(); // released with the run open, marked for resume
    // another worker claims it (the claim takes the mark) and, its open failing, gives it back unbound
    const other = serve(
      {
        open: () => Promise.reject(new Error('another writer attached meanwhile')),
        store,
        work: store.work!,
        inboxFor: () => {
          throw new Error('no session is opened');
        },
        isKilled: () => false,
      },
      { workerId: 'other', concurrency: 1, leaseMs: 5000, pollMs: 20 },
    );
    const seen: ServeEvent[] = [];
    other.subscribe((e) => seen.push(e));
    await until(() => seen.some((e) => e.type === 'released'));
    await other.stop();
    expect(seen.find((e) => e.type === 'error')).toMatchObject({ sessionId: 's', message: 'another writer attached meanwhile' });
    expect(seen.find((e) => e.type === 'released')).toMatchObject({ sessionId: 's', resume: true });
    expect((await store.work!.listLeases()).find((l) => l.sessionId === 's')).toMatchObject({ workerId: null, resume: true });
    const second = make(store, started, 10);
    const h2 = second.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    const result = await second.waitForResult('s', 'r', { signal: AbortSignal.timeout(scaled(10_000)), pollMs: 20 });
    expect(result.status).toBe('succeeded');
    await h2.stop();
  });

  it('runtime.close() while serving leaves each run where it stands, its lease released with the resume mark or left to expire; the next worker finishes every run', async () => {
    const db = lmdbPathFor(cleanups);
    const started: string[] = [];
    const model = toolLoopModel({ steps: 1, toolsPerStep: 1, tools: ['charge'] });
    const first = db.rt({ model, tools: [slowCharge(300, started)] });
    const h1 = first.serve({ concurrency: 4, leaseMs: 1000, pollMs: 20 });
    const events: ServeEvent[] = [];
    h1.subscribe((e) => events.push(e));
    const ids = ['s', 't', 'u'];
    for (const id of ids) await first.submit(id, { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === ids.length);
    await first.close(); // as a SIGTERM handler would, with the worker serving
    // a session whose release beat the store's close records the run open; the others' leases expire
    expect(events.filter((e) => e.type === 'released')).toEqual(
      events.filter((e) => e.type === 'released').map((e) => expect.objectContaining({ resume: true })),
    );
    const second = db.rt({ model, tools: [slowCharge(10, started)] });
    const h2 = second.serve({ concurrency: 4, leaseMs: 1000, pollMs: 20 });
    for (const id of ids)
      expect((await second.waitForResult(id, 'r', { signal: AbortSignal.timeout(scaled(10_000)), pollMs: 20 })).status).toBe('succeeded');
    await h2.stop();
  });

  it("a worker stopped by stop() leaves no listener on its signal: an app's long-lived signal keeps no stopped worker alive", async () => {
    const runtime = make(memoryStore(), [], 10);
    const shutdown = new AbortController();
    for (let i = 0; i < 3; i++) await runtime.serve({ concurrency: 1, leaseMs: 5000, pollMs: 20, signal: shutdown.signal }).stop();
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
  });

  it('runtime.close() while serving ends its workers: each reports stopped and its closed resolves, idle or holding a running session', async () => {
    const started: string[] = [];
    const runtime = make(memoryStore(), started, 60_000);
    const idle = runtime.serve({ concurrency: 1, leaseMs: 5000, pollMs: 20 });
    const busy = runtime.serve({ concurrency: 1, leaseMs: 5000, pollMs: 20 });
    const events: ServeEvent[] = [];
    busy.subscribe((e) => events.push(e));
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === 1);
    await runtime.close();
    const ended = await Promise.race([
      Promise.all([idle.closed, busy.closed]).then(() => 'closed'),
      sleep(scaled(5000)).then(() => 'hung'),
    ]);
    expect(ended).toBe('closed');
    expect(events.at(-1)).toMatchObject({ type: 'stopped' });
    expect([...idle.sessions, ...busy.sessions]).toEqual([]);
  });

  it('past the grace time a session asked to stop is detached; the next worker honours the accepted stop', async () => {
    const store = memoryStore();
    const started: string[] = [];
    const first = make(store, started, 400);
    const h1 = first.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20, shutdownGraceMs: 0 });
    await first.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === 1);
    await h1.stop();
    expect((await store.getHead('s'))!.openRun?.runId).toBe('r');
    const second = make(store, started, 10);
    const h2 = second.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    expect((await second.waitForResult('s', 'r', { signal: AbortSignal.timeout(10_000), pollMs: 20 })).status).toBe('stopped');
    await h2.stop();
  });

  it('another writer attaching fences the worker: it reports the loss and starts no exclusive tool after it', async () => {
    const store = memoryStore();
    const started: string[] = [];
    const runtime = make(store, started, 200);
    const handle = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    const events: ServeEvent[] = [];
    handle.subscribe((e) => events.push(e));
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === 1);
    const takeover = await store.attachWriter('s'); // someone else takes the session over
    await until(() => events.some((e) => e.type === 'lease_lost' || e.type === 'fenced'), 10_000);
    await sleep(scaled(500));
    expect(started).toHaveLength(1);
    // no append of the fenced worker landed after the takeover
    expect((await logOf(store, 's')).length).toBe(takeover.lastSeq);
    await handle.stop();
  });

  it("a lease the store stops renewing counts as lost by the worker's own clock: its writer is fenced before the next exclusive tool", async () => {
    const inner = memoryStore();
    const work = inner.work!;
    let renewals = true;
    const store: EventStore = Object.assign(Object.create(Object.getPrototypeOf(inner)), inner, {
      work: Object.assign(Object.create(Object.getPrototypeOf(work)), work, {
        renew: async (...a: Parameters<typeof work.renew>) => (renewals ? work.renew(...a) : []),
      }),
    });
    const started: string[] = [];
    const runtime = make(store, started, 150);
    const handle = runtime.serve({ concurrency: 2, leaseMs: 300, pollMs: 20 });
    const events: ServeEvent[] = [];
    handle.subscribe((e) => events.push(e));
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => started.length === 1);
    renewals = false;
    await until(() => events.some((e) => e.type === 'lease_lost'), 10_000);
    const lostAt = started.length;
    renewals = true;
    // the lease expires in the store too: the worker claims it again and finishes the run
    const result = await runtime.waitForResult('s', 'r', { signal: AbortSignal.timeout(15_000), pollMs: 20 });
    expect(result.status).toBe('succeeded');
    expect(lostAt).toBeLessThanOrEqual(2);
    expect(events.filter((e) => e.type === 'claimed').length).toBeGreaterThanOrEqual(2);
    await handle.stop();
  });

  it('a lease lost while the session opens reports the writer epoch that session attached with', async () => {
    const inner = memoryStore();
    let stalls = 1;
    // the first attach takes longer than the lease: the worker's own clock gives the lease up
    // before the session's first commit (its session/attached record)
    const store: EventStore = Object.assign(Object.create(Object.getPrototypeOf(inner)), inner, {
      attachWriter: async (...a: Parameters<typeof inner.attachWriter>) => {
        const attached = await inner.attachWriter(...a);
        if (stalls-- > 0) await sleep(400);
        return attached;
      },
    });
    const runtime = make(store, [], 10);
    const handle = runtime.serve({ concurrency: 1, leaseMs: 150, pollMs: 20 });
    const events: ServeEvent[] = [];
    handle.subscribe((e) => events.push(e));
    await runtime.submit('s', { kind: 'input', inputId: 'r', mode: 'follow_up', message: 'go' });
    await until(() => events.some((e) => e.type === 'error' && e.sessionId === 's'));
    const failed = events.find((e) => e.type === 'error' && e.sessionId === 's');
    expect(failed).toMatchObject({ message: expect.stringContaining('lease (writer epoch 1) is lost') });
    expect(events.find((e) => e.type === 'lease_lost')).toMatchObject({ sessionId: 's' });
    expect((await runtime.waitForResult('s', 'r', { signal: AbortSignal.timeout(10_000), pollMs: 20 })).status).toBe('succeeded');
    await handle.stop();
  });

  it('the kill switch cancels every session the worker holds and it claims no more while set', async () => {
    const store = memoryStore();
    const started: string[] = [];
    const kill = new AbortController();
    const runtime = make(store, started, 300, { killSwitch: kill.signal });
    const handle = runtime.serve({ concurrency: 4, leaseMs: 5000, pollMs: 20 });
    for (const s of ['a', 'b']) await runtime.submit(s, { kind: 'input', inputId: `${s}-r`, mode: 'follow_up', message: 'go' });
    await until(() => started.length === 2);
    kill.abort();
    for (const s of ['a', 'b'])
      expect((await runtime.waitForResult(s, `${s}-r`, { signal: AbortSignal.timeout(5000), pollMs: 20 })).status).toBe('cancelled');
    await runtime.submit('c', { kind: 'input', inputId: 'c-r', mode: 'follow_up', message: 'go' });
    await sleep(scaled(300));
    expect(handle.sessions).not.toContain('c');
    expect((await store.work!.pending('c')).length).toBe(1);
    await handle.stop();
  });
});
