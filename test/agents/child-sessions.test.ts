import { afterEach, describe, expect, it } from 'vitest';
import {
  agentTool,
  createRuntime,
  defineAgent,
  isValidationError,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type FinalAnswer,
  type ScriptedStep,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { logOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// A child session (an agent call's) belongs to its parent call (docs/agents.md, "Child sessions"):
// its answer is the call's result, not the app's delivery, and the app sends it nothing of its own.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ask = (id: string, input: string): ScriptedStep => ({ toolCalls: [{ id, name: 'researcher', arguments: { input } }] });
const CHILD = 's/r/1/c1';

describe('child sessions', () => {
  it("a child's final answer is its parent call's result, never given to the app's delivery owner (one that throws cannot fail it)", async () => {
    const delivered: FinalAnswer[] = [];
    const researcher = defineAgent({ name: 'researcher', instructions: 'r', model: scriptedModel(['tea: a drink']) });
    const store = memoryStore();
    const runtime = createRuntime({
      store,
      model: scriptedModel([ask('c1', 'tea?'), 'Tea is a drink.']),
      tools: [agentTool(researcher)],
      delivery: {
        deliver: async (f) => {
          delivered.push(f);
          // an owner that refuses anything but the root's answer: a child's would fail the call
          if (f.sessionId !== 's') throw new Error('not an app session');
        },
      },
    });
    cleanups.push(() => runtime.close());
    const r = await (await runtime.openSession('s')).execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'what is tea?' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'Tea is a drink.' });
    expect(delivered.map((f) => [f.sessionId, f.content])).toEqual([['s', 'Tea is a drink.']]);
    const child = await logOf(store, CHILD);
    expect(child.find((e) => e.type === 'delivery/committed')?.payload).toMatchObject({ owner: 'result' });
    expect(child.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).toEqual(['succeeded']);
  });

  it('a child session takes nothing from the app: its open and its inbox are refused naming its parent call, and nothing is written', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const started = deferred();
    const researcher = defineAgent({
      name: 'researcher',
      instructions: 'r',
      model: scriptedModel([
        () => {
          started.resolve();
          return { text: 'tea: a drink', delayMs: 200 };
        },
      ]),
    });
    const runtime = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel([ask('c1', 'tea?'), 'Tea is a drink.']),
      tools: [agentTool(researcher)],
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const run = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'what is tea?' });
    await started.promise;
    // while the child runs (live in this runtime), and after it settled (read from its log)
    for (const when of ['live', 'settled']) {
      if (when === 'settled') expect(await run).toMatchObject({ status: 'succeeded' });
      const before = (await logOf(runtime.store, CHILD)).length;
      const opened = await runtime.openSession(CHILD).catch((e: unknown) => e);
      const submitted = await runtime.submit(CHILD, 'and coffee?').catch((e: unknown) => e);
      for (const refused of [opened, submitted]) {
        expect(isValidationError(refused), `${when}: ${String(refused)}`).toBe(true);
        expect((refused as Error).message).toContain(`call c1 of session s`);
      }
      expect(await runtime.store.work!.pending(CHILD)).toEqual([]);
      // (a settled child's log is as its run left it)
      if (when === 'settled') expect((await logOf(runtime.store, CHILD)).length).toBe(before);
    }
    const child = await logOf(runtime.store, CHILD);
    expect(child.filter((e) => e.type === 'run/start').map((e) => e.payload.runId)).toEqual(['answer']);
  });
});
