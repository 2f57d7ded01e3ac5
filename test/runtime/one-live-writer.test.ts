import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  isSessionHeldError,
  isValidationError,
  lmdbStore,
  memoryStore,
  scriptedModel,
} from '../../src/index.js';
import type { ExecutionSession } from '../../src/runtime/execution-session.js';
import { LiveSessions } from '../../src/runtime/live-sessions.js';
import { deferred } from '../helpers/drafts.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';

// One live writer per session in one process (docs/guarantees.md, "One live writer"): the same
// runtime shares its live session, a second runtime takes it over. Across processes:
// test/crash/session-held.test.ts.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

describe('openSession on one runtime', () => {
  it('returns the live session, not a second writer; the writer closes with the last opener’s close', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['first', 'second']) });
    const a = await rt.openSession('s');
    const b = await rt.openSession('s');
    expect(b).toBe(a);
    expect((await rt.store.getHead('s'))?.writerEpoch).toBe(a.recovery.writerEpoch); // attached once
    await a.close();
    expect(b.snapshot().status).toBe('idle'); // one opener left
    const r = await b.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
    expect(r.status).toBe('succeeded');
    await b.close();
    expect(b.snapshot().status).toBe('closed');
    await b.close(); // a close past the last opener: nothing more to close
    const c = await rt.openSession('s');
    expect(c).not.toBe(a);
    expect(c.recovery.writerEpoch).toBe(a.recovery.writerEpoch + 1);
  });

  it('opens one writer for calls made together', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['x']) });
    const [a, b] = await Promise.all([rt.openSession('s'), rt.openSession('s')]);
    expect(b).toBe(a);
    expect((await rt.store.getHead('s'))?.writerEpoch).toBe(1);
  });

  it('closes a shared session with the runtime, whatever its openers', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['x']) });
    const a = await rt.openSession('s');
    await rt.openSession('s');
    await rt.close();
    expect(a.snapshot().status).toBe('closed');
  });

  it('refuses an unknown option (ValidationError) before opening anything', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['x']) });
    const err = await rt.openSession('s', { takeOver: true } as never).catch((e: unknown) => e);
    expect(isValidationError(err)).toBe(true);
    expect(await rt.store.getHead('s')).toBeUndefined();
  });
});

describe('two runtimes of one process', () => {
  it('the second takes the session over (fencing the first) with no SessionHeldError; the fenced one is not shared', async () => {
    const db = lmdbPath();
    const first = db.rt({ model: scriptedModel(['x']) });
    const second = createRuntime({ store: lmdbStore({ path: db.path }), model: scriptedModel(['y']) });
    cleanups.unshift(() => second.close());
    const a = await first.openSession('s');
    const b = await second.openSession('s');
    expect(b.recovery.writerEpoch).toBe(a.recovery.writerEpoch + 1);
    // a is fenced: opening again on the first runtime attaches a new writer (and fences b in turn)
    const c = await first.openSession('s');
    expect(c).not.toBe(a);
    expect(c.recovery.writerEpoch).toBe(b.recovery.writerEpoch + 1);
    const r = await c.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
    expect(r.status).toBe('succeeded');
    await a.close();
    await c.close();
  });

  it("refuses an app's open of a session this runtime's serving worker holds (SessionHeldError naming the worker) instead of fencing it", async () => {
    const db = lmdbPath();
    const started = deferred();
    const gate = deferred();
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started.resolve(), await gate.promise, 'done'),
    });
    const rt = db.rt({ model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'finished']), tools: [slow] });
    const worker = rt.serve({ concurrency: 1, leaseMs: 5000, pollMs: 20 });
    const { entryId } = await rt.submit('s', 'go');
    await started.promise;
    const refused = await rt.openSession('s').catch((e: unknown) => e);
    expect(refused).toSatisfy(isSessionHeldError);
    expect(String(refused)).toMatch(/worker/);
    gate.resolve();
    const result = await rt.waitForResult('s', entryId, { signal: AbortSignal.timeout(10_000) });
    expect(result.status).toBe('succeeded'); // the worker was not fenced
    await worker.stop();
  });
  it("refuses an app's open of a session this runtime's worker has claimed and not yet opened (SessionHeldError), never fencing the worker", async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel([{ text: 'hi', delayMs: 100 }]) });
    const worker = rt.serve({ concurrency: 1, leaseMs: 5000, pollMs: 10 });
    const opened = deferred<unknown>();
    const seen: string[] = [];
    worker.subscribe((e) => {
      seen.push(e.type === 'error' ? `error: ${e.message}` : e.type);
      // the app opens the session right as the worker claims it, before the worker's open
      if (e.type === 'claimed' && e.sessionId === 's') rt.openSession('s').then(opened.resolve, opened.resolve);
    });
    const { entryId } = await rt.submit('s', 'go');
    const refused = await opened.promise;
    expect(refused).toSatisfy(isSessionHeldError);
    const result = await rt.waitForResult('s', entryId, { signal: AbortSignal.timeout(10_000) });
    expect(result.status).toBe('succeeded');
    expect(seen.filter((e) => e.startsWith('error') || e === 'fenced' || e === 'lease_lost')).toEqual([]);
    expect(seen.filter((e) => e === 'attached')).toHaveLength(1); // attached once: never fenced and claimed again
    await worker.stop();
  });

  it("a worker that ends, however, leaves none of its claims refusing the app's open of a session", async () => {
    const live = new LiveSessions(memoryStore(), () => false);
    // past the check, the open attaches a writer (here: the attach says it was reached)
    const attach = (): Promise<ExecutionSession> => Promise.reject(new Error('attached'));
    live.claimedBy('s', 'w1');
    live.claimedBy('s', 'w2');
    await expect(live.open('s', false, attach)).rejects.toSatisfy(isSessionHeldError);
    live.workerEnded('w1'); // w1 failed without ending its claim; w2's still holds the session
    await expect(live.open('s', false, attach)).rejects.toSatisfy(isSessionHeldError);
    live.claimEnded('s', 'w2');
    await expect(live.open('s', false, attach)).rejects.toThrow('attached');
  });
});
