import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { EventDraft } from '../../src/contracts/events.js';
import { createRuntime, defineTool, lmdbStore, memoryStore, scriptedModel } from '../../src/index.js';
import { hookedStore, lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { ids, lmdbRuntime, logOf, sleep, storeWithAppend, within } from '../helpers/runtime.js';

// session.close() and runtime.close(): a pending execute always settles with a result that
// agrees with the log; nothing is written after close.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

describe('closing with an execute pending', () => {
  it('execute settles with a result when the session is closed mid-run', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'slow answer', delayMs: 5_000 }]) });
    const s = await runtime.openSession('s');
    const p = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(100); // the model call is under way
    await s.close();
    // DESIGN §6: execute rejects only for bad input / ExecutionBusy; everything else is a result
    expect(await within(p, 2_000)).not.toBe('still pending');
  });

  it('an execute still preparing when the session is closed settles with a detached result', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['hi']) });
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await s.close();
    const got = await within(
      p.catch((e: unknown) => e),
      1000,
    );
    expect(got).not.toBe('still pending');
  });

  // guarantees.md, close()/runtime.close(): "a run in progress is abandoned where it stands ...; its
  // pending execute resolves with a detached result saying so (also one still reading the log before
  // its attempt started)". With runtime.close() the store is closed under the preparing execute.
  it('runtime.close() while an execute is still reading the log settles it with a detached result (no StoreClosedError rejection)', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['hi']) });
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await rt.close();
    const got = await within(
      p.then(
        (r) => r,
        (e: unknown) => ({ rejected: String(e) }),
      ),
      1000,
    );
    expect(got).toMatchObject({ runId: 'r', attemptId: 'a', status: 'detached', outcome: 'incomplete' });
  });

  // DESIGN §6: "ExecutionResult { ... checkpointCommitted ... }" and guarantees.md: without a delivery
  // owner "the result itself was the delivery" (delivery/committed owner 'result'). When close() lands
  // while the run/end commit is already in flight, the commit lands (succeeded, final delivered through
  // the result) but the execute is told `detached ... the run is left resumable: continue it` — and
  // a continue is then refused; the final answer never reaches the caller.
  it('session.close() while the run/end commit is in flight gives an execute result that agrees with the log', async () => {
    const db = lmdbPath();
    let session: { close(): Promise<void> } | undefined;
    const store = hookedStore(lmdbStore({ path: db.path }), async (drafts) => {
      if (drafts.some((d) => d.type === 'run/end')) {
        void session!.close(); // shutdown while the closing commit is being written
        await sleep(20);
      }
    });
    const rt = db.rt({ model: scriptedModel(['the answer']) }, store);
    const s = await rt.openSession('s');
    session = s;
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await sleep(100);
    const reader = lmdbStore({ path: db.path });
    const log = await logOf(reader, 's');
    await reader.close();
    const end = log.find((e) => e.type === 'run/end');
    expect({ result: r.status, logged: end?.payload.status ?? 'none' }).toEqual(
      end ? { result: 'succeeded', logged: 'succeeded' } : { result: 'detached', logged: 'none' },
    );
  });

  it('execute returns the recorded result of an attempt that finished suspended even if the session closes right then', async () => {
    const deploy = defineTool({ name: 'deploy', description: '', parameters: z.object({}), needsApproval: true, execute: () => 'ok' });
    const { runtime } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'deploy', arguments: {} }] }]),
      tools: [deploy],
    });
    const s = await runtime.openSession('s');
    // the runtime closes at the moment the attempt finished (e.g. runtime.close() on shutdown)
    const sub = s.actor.subscribe((snap) => snap.matches('finalizing') && (sub.unsubscribe(), void s.close()));
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'deploy' });
    const recorded = (await logOf(runtime.store, 's')).find((e) => e.type === 'run/end')!.payload.result as { status: string };
    expect(recorded.status).toBe('suspended');
    // DESIGN §6: the attempt's result is the recorded one (its pendingRequest included)
    expect({ status: r.status, pending: r.pendingRequest?.kind }).toEqual({ status: 'suspended', pending: 'approval' });
  });

  // The new continue-settles-an-undelivered-final branch catches the closed writer's error and
  // returns `failed` ("continue it again") instead of checking `this.closed` as the outer catch does.
  it('session.close() while a continue is settling an undelivered final answers that execute detached', async () => {
    const db = lmdbPath();
    let failRunEnd = true;
    const inner = lmdbStore({ path: db.path });
    const store = storeWithAppend(inner, async (id, epoch, seq, drafts) => {
      if (failRunEnd && (drafts as EventDraft[]).some((d) => d.type === 'run/end')) {
        failRunEnd = false;
        throw new Error('disk hiccup');
      }
      return inner.append(id, epoch, seq, drafts);
    });
    let slow = false;
    let entered!: () => void;
    const inDeliver = new Promise<void>((r) => (entered = r));
    const rt = db.rt(
      {
        model: scriptedModel(['the answer']),
        delivery: {
          idempotent: true,
          deliver: async () => {
            if (!slow) return;
            entered();
            await sleep(200);
          },
        },
      },
      store,
    );
    const s = await rt.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r1.checkpointCommitted).toBe(false);
    slow = true;
    const p = s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    await inDeliver;
    await s.close();
    const r2 = await p;
    // guarantees.md close(): "its pending execute resolves with a detached result saying so (also one
    // still reading the log before its attempt started)"
    expect(r2.status).toBe('detached');
  });
});

describe('waitForIdle after close', () => {
  // guarantees.md, waitForIdle(): "resolves when no attempt runs and no follow-up waits to start".
  // close() leaves `busy` set (the stopped run never reports), so a waitForIdle made after close never settles.
  it('waitForIdle() called after session.close() (a run was in progress) resolves', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel([{ text: 'slow', delayMs: 5000 }]) });
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await sleep(50);
    await s.close();
    expect((await p).status).toBe('detached');
    expect(await within(s.waitForIdle(), 1000)).not.toBe('still pending');
  });
});

describe('what a closed session leaves in memory', () => {
  // Reachability, not timing: once closed, nothing of the runtime, its store or its actors keeps
  // the session object (DESIGN: a closed session keeps nothing in memory).
  const gc = (() => {
    setFlagsFromString('--expose-gc');
    return runInNewContext('gc') as () => void;
  })();
  const collected = async (ref: WeakRef<object>) => {
    for (let i = 0; i < 5 && ref.deref() !== undefined; i++) {
      await new Promise((r) => setTimeout(r, 10)); // a WeakRef is cleared only after its job ends
      gc();
    }
    return ref.deref() === undefined;
  };
  const lookup = defineTool({
    name: 'lookup',
    description: 'l',
    mode: 'parallel',
    parameters: z.object({ i: z.number() }),
    execute: ({ i }) => `v${i}`,
  });
  const write = defineTool({ name: 'write', description: 'w', parameters: z.object({ i: z.number() }), execute: ({ i }) => `w${i}` });
  const script = () =>
    scriptedModel([
      {
        toolCalls: [
          { name: 'lookup', arguments: { i: 1 } },
          { name: 'write', arguments: { i: 1 } },
        ],
      },
      'done',
    ]);

  for (const kind of ['memory', 'lmdb'] as const) {
    it(`a settled and closed session is garbage once the app drops it (${kind} store, runtime still open)`, async () => {
      const store = kind === 'memory' ? memoryStore() : lmdbStore({ path: lmdbPath().path });
      const runtime = createRuntime({ store, model: script(), tools: [lookup, write] });
      cleanups.push(() => runtime.close());
      const ref = await (async () => {
        const s = await runtime.openSession('kept-or-not');
        const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
        expect(r.status).toBe('succeeded');
        await s.close();
        return new WeakRef(s);
      })();
      expect(await collected(ref), 'the closed session is still reachable').toBe(true);
    });
  }
});
