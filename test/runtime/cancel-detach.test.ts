import { Subject } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import {
  createRuntime,
  defineTool,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type EventStore,
  type ExecutionSession,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { holdingAppendOf, ids, lmdbRuntime, logOf, memRuntime, sleep, storeWithAppend, typesOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// requestCancel, requestDetach, the kill switch and waitForIdle.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

describe('requestCancel', () => {
  it('requestCancel aborts the model call', async () => {
    const { runtime, store } = lmdbRuntime({ model: scriptedModel([{ text: 'slow', delayMs: 5000 }]) });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(30);
    expect(await s.requestCancel()).toBe(true);
    const r = await running;
    expect(r).toMatchObject({ outcome: 'cancelled', status: 'cancelled', error: { kind: 'cancelled' } });
    expect(typesOf(await logOf(store, 's'))).toContain('cancellation/requested');
  });

  it('a tool that ignores its signal past the grace period is recorded uncertain-hanging; the run ends cancelled', async () => {
    const started = deferred();
    const deaf = defineTool({
      name: 'deaf',
      description: '',
      parameters: z.object({}),
      resources: ['db'],
      execute: () => (started.resolve(), new Promise(() => {})),
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'deaf', arguments: {} }] }]),
      tools: [deaf],
      config: { cancelGraceMs: 40 },
    });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await started.promise;
    await s.requestCancel();
    const r = await running;
    expect(r.status).toBe('cancelled');
    const outcome = (await logOf(store, 's')).find((e) => e.type === 'tool/result')!.payload.outcome;
    expect(outcome).toMatchObject({ kind: 'uncertain-hanging', resourceLocks: ['db'] });
  });

  // guarantees.md, requestCancel(): "cancels the attempt running when it is called". An execute that
  // is still preparing is covered for requestDetach ("A detach asked for while an execute was still
  // preparing its attempt", detachPending) and RunInput.cancelRequested is documented as "A detach or
  // cancel asked for before the attempt had started" — but nothing ever sets it: the cancel is
  // dropped (false) and the attempt then runs its side-effecting tool to completion.
  it('requestCancel() right after execute() (the attempt still preparing) cancels that attempt', async () => {
    const runs: string[] = [];
    const act = defineTool({ name: 'act', description: '', parameters: z.object({}), execute: () => (runs.push('act'), 'done') });
    const rt = createRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'act', arguments: {} }] }, 'finished']),
      tools: [act],
      store: memoryStore(),
    });
    cleanups.push(() => rt.close());
    const s = await rt.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    const cancelled = await s.requestCancel();
    const r = await p;
    expect({ cancelled, status: r.status, runs }).toEqual({ cancelled: true, status: 'cancelled', runs: [] });
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
      model: scriptedModel([
        {
          toolCalls: [
            { name: 'fetch', arguments: { url: 'a' } },
            { name: 'fetch', arguments: { url: 'b' } },
          ],
        },
        'done',
      ]),
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

  it('a cancel that races the end of a run cancels no follow-up run started after it', async () => {
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
    const runtime = createRuntime({
      store,
      model: scriptedModel([
        { text: 'answer A', delayMs: 100 },
        { text: 'answer B', delayMs: 200 },
      ]),
    });
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

  it("a cancel arriving while a step's approval request commits ends the run cancelled, not suspended: the calls are skipped, and a reopen finds nothing to answer", async () => {
    const base = memoryStore();
    // the step's first commit (its approval request) waits until released
    const { store, landing, release } = holdingAppendOf(base, 'approval/requested');
    const ran: string[] = [];
    const deploy = defineTool({
      name: 'deploy',
      description: 'd',
      parameters: z.object({}),
      needsApproval: true,
      execute: () => {
        ran.push('deploy');
        return 'deployed';
      },
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'deploy', arguments: {} }] }, 'never asked']);
    const { runtime } = memRuntime({ model, tools: [deploy] }, store);
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await landing.promise;
    const cancelled = s.requestCancel('user');
    release.resolve();
    expect(await cancelled).toBe(true);
    const r = await running;
    expect(r).toMatchObject({ status: 'cancelled', outcome: 'cancelled' });
    expect(r.pendingRequest).toBeUndefined();
    expect(s.pendingRequest).toBeUndefined();
    const log = await logOf(base, 's');
    const types = typesOf(log);
    expect(types.slice(types.indexOf('approval/requested'))).toEqual([
      'approval/requested',
      'run/suspended',
      'cancellation/requested',
      'tool/result',
      'step/end',
      'run/end',
    ]);
    expect(log.find((e) => e.type === 'tool/result')!.payload.outcome).toMatchObject({ kind: 'skipped' });
    expect(log.find((e) => e.type === 'run/end')!.payload.status).toBe('cancelled');
    expect(ran).toEqual([]);
    // a reopen (recovery) agrees: no open run, nothing to answer
    const { runtime: reopened } = memRuntime({ model: scriptedModel([]), tools: [deploy] }, base);
    const s2 = await reopened.openSession('s', { resume: 'manual' });
    expect(s2.recovery.interruptedRuns).toEqual([]);
    expect(s2.pendingRequest).toBeUndefined();
  });

  // guarantees.md requestCancel: "resolves false when nothing runs, or the attempt ended first". In
  // onRunFinished `current` is cleared while `busy` stays true (loadOpenRun), and the new
  // `!target && busy` branch answers true though nothing will be cancelled.
  it('requestCancel called after the attempt ended (its result being settled) resolves false', async () => {
    const store0 = memoryStore();
    let slowHead = false;
    const store: EventStore = {
      ...storeWithAppend(store0, (...a) => store0.append(...a)),
      getHead: async (id) => {
        if (slowHead) await sleep(300);
        return store0.getHead(id);
      },
    };
    const deploy = defineTool({
      name: 'deploy',
      description: 'd',
      parameters: z.object({}),
      needsApproval: true,
      execute: () => 'deployed',
    });
    const { runtime: rt } = memRuntime(
      { model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'deploy', arguments: {} }] }, 'done']), tools: [deploy] },
      store,
    );
    const s = await rt.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type));
    slowHead = true;
    const p = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    for (let i = 0; i < 200 && !(await logOf(store0, 's')).some((e) => e.type === 'run/end'); i++) await sleep(5);
    await sleep(50); // the run has ended (run/end committed); the session is reading the open run back
    const cancelled = await s.requestCancel();
    const r = await p;
    slowHead = false;
    expect(r.status).toBe('suspended');
    expect((await logOf(store0, 's')).some((e) => e.type === 'cancellation/requested')).toBe(false);
    expect(cancelled).toBe(false);
  });
});

describe('requestCancel once the end is decided', () => {
  // Past these commits nothing a cancel does changes the run's end (a committed final answer is
  // delivered, write-ahead): requestCancel says so, and writes no request nothing would honour.
  it.each(['final/message', 'run/end'])(
    'a cancel while %s commits resolves false, writes no cancellation/requested, and the run completes',
    async (type) => {
      const base = memoryStore();
      const { store, landing, release } = holdingAppendOf(base, type);
      const { runtime } = memRuntime({ model: scriptedModel(['the answer']) }, store);
      const s = await runtime.openSession('s');
      const running = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
      await landing.promise;
      const cancelled = s.requestCancel('too late');
      release.resolve();
      expect(await cancelled).toBe(false);
      expect(await running).toMatchObject({ status: 'succeeded', outcome: 'completed' });
      expect(typesOf(await logOf(base, 's'))).not.toContain('cancellation/requested');
    },
  );
});

describe('requestDetach', () => {
  it('requestDetach stops at the next safe point, leaving the run incomplete and open', async () => {
    const started = deferred();
    const gate = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await gate.promise, 'x'),
    });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'later']),
      tools: [slow],
    });
    const s = await runtime.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    expect(s.requestDetach()).toBe(true);
    gate.resolve();
    expect(await running).toMatchObject({ outcome: 'incomplete', status: 'detached' });
    expect((await store.getHead('s'))!.openRun).toMatchObject({ runId: 'r' });
    await s.waitForIdle();
  });
});

describe('the kill switch', () => {
  it('the kill switch cancels running sessions and starts no new attempt while set', async () => {
    const kill = new Subject<boolean>();
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'slow', delayMs: 5000 }, 'after']), killSwitch: kill });
    const a = await runtime.openSession('a');
    const running = a.execute({ kind: 'prompt', ...ids(), message: 'go' });
    await sleep(30);
    kill.next(true);
    expect((await running).status).toBe('cancelled');
    expect(await a.execute({ kind: 'prompt', ...ids(), message: 'again' })).toMatchObject({ outcome: 'cancelled', status: 'cancelled' });
    kill.next(false);
    expect((await a.execute({ kind: 'prompt', ...ids(), message: 'again' })).status).toBe('succeeded');
  });

  it('a kill switch Observable emitting a falsy value such as 0 clears the switch', async () => {
    const db = lmdbPath();
    const ks = new Subject<unknown>();
    const rt = db.rt({ model: scriptedModel(['hi']), killSwitch: ks });
    const s = await rt.openSession('s');
    ks.next(1);
    ks.next(0);
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    expect(r.status).toBe('succeeded');
  });
});

describe('waitForIdle', () => {
  it('waitForIdle resolves when nothing executes', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel([{ text: 'x', delayMs: 30 }]) });
    const s = await runtime.openSession('s');
    await s.waitForIdle();
    let done = false;
    void s.execute({ kind: 'prompt', ...ids(), message: 'go' }).then(() => (done = true));
    await s.waitForIdle();
    expect(done).toBe(true);
  });
});
