import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  lmdbStore,
  postgresStore,
  scriptedModel,
  type EventStore,
  type RuntimeOptions,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { logOf, typesOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * The run engine on every durable store: a representative set of the runtime and recovery tests
 * (a tool run, an approval suspended and answered from a new runtime, a crash recovered with
 * `continue`), each run on LMDB and on PostgreSQL. A "place" is one durable log that several
 * runtimes (lives of a process) open in turn.
 */
const db = await postgresForTests('the run engine on PostgreSQL');

interface Place {
  open(): EventStore;
  cleanup(): Promise<void>;
}
const places: [string, () => Place][] = [
  [
    'lmdb',
    () => {
      const dir = tempDir();
      return { open: () => lmdbStore({ path: dir.path }), cleanup: dir.cleanup };
    },
  ],
];
if (db) {
  places.push([
    'postgres',
    () => {
      const schema = freshSchema('engine');
      return { open: () => postgresStore({ connectionString: db.url, schema }), cleanup: async () => {} };
    },
  ]);
}

const hang = () => new Promise<string>(() => {});
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.each(places)('the run engine on %s', (_name, makePlace) => {
  const place = () => {
    const p = makePlace();
    cleanups.push(p.cleanup);
    return p;
  };
  const runtime = (p: Place, options: Omit<RuntimeOptions, 'store'>, close = true) => {
    const rt = createRuntime({ ...options, store: p.open() });
    if (close) cleanups.push(() => rt.close());
    return rt;
  };

  it('a prompt runs a tool and delivers its final answer, and a repeated attempt returns the recorded result', async () => {
    const p = place();
    const add = defineTool({
      name: 'add',
      description: 'adds',
      mode: 'parallel',
      parameters: z.object({ a: z.number(), b: z.number() }),
      execute: ({ a, b }) => String(a + b),
    });
    const delivered: string[] = [];
    const rt = runtime(p, {
      model: scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 1, b: 2 } }] }, 'It is 3.']),
      tools: [add],
      delivery: { deliver: async (f) => void delivered.push(f.content) },
    });
    const s = await rt.openSession('s1');
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'what is 1+2?' });
    expect(r).toMatchObject({ outcome: 'completed', status: 'succeeded', finalMessage: 'It is 3.' });
    expect(delivered).toEqual(['It is 3.']);
    expect(typesOf(await logOf(rt.store, 's1'))).toEqual([
      'session/attached',
      'run/start',
      'user/message',
      'step/start',
      'assistant/message',
      'tool/call',
      'tool/result',
      'step/end',
      'step/start',
      'assistant/message',
      'final/message',
      'step/end',
      'delivery/committed',
      'run/end',
    ]);
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'what is 1+2?' })).finalMessage).toBe('It is 3.');
    expect(delivered).toHaveLength(1);
  });

  it('an approval suspends the run; answered from a new runtime, the approved call runs once', async () => {
    const p = place();
    const runs: string[] = [];
    const deploy = defineTool({
      name: 'deploy',
      description: '',
      parameters: z.object({ env: z.string() }),
      needsApproval: true,
      execute: ({ env }) => (runs.push(env), `deployed to ${env}`),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'd1', name: 'deploy', arguments: { env: 'prod' } }] }, 'Deployed.']);
    const rt1 = runtime(p, { model, tools: [deploy] });
    const s1 = await rt1.openSession('s');
    const r1 = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'deploy to prod' });
    expect(r1).toMatchObject({
      outcome: 'suspended',
      status: 'suspended',
      pendingRequest: { kind: 'approval', calls: [{ callId: 'd1', name: 'deploy' }] },
    });
    expect(runs).toEqual([]);
    await rt1.close();

    const rt2 = runtime(p, { model, tools: [deploy] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r', pendingRequest: { kind: 'approval' } }]);
    const questionId = r1.pendingRequest!.questionId;
    const r2 = await s2.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId, answer: { decisions: { d1: 'approve' } } });
    expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'Deployed.' });
    expect(runs).toEqual(['prod']);
    const log = await logOf(rt2.store, 's');
    expect(log.filter((e) => e.type === 'approval/decided')).toHaveLength(1);
  });

  it('after a crash mid-tool, a new runtime reconciles the exclusive call and continues the run to completion', async () => {
    const p = place();
    const started = deferred();
    const keys: string[] = [];
    const t1 = defineTool({
      name: 'send',
      description: '',
      parameters: z.object({}),
      execute: (_a, ctx) => (keys.push(ctx.idempotencyKey), started.resolve(), hang()),
    });
    const t2 = defineTool({
      name: 'send',
      description: '',
      parameters: z.object({}),
      execute: () => 'should not run',
      reconcile: (_a, ctx) => (keys.push(`reconcile:${ctx.idempotencyKey}`), { kind: 'completed', content: 'it was sent' }),
    });
    // the first life is abandoned mid-tool (never closed): its log ends where a killed process's would
    const rt1 = runtime(p, { model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'send', arguments: {} }] }]), tools: [t1] }, false);
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'send' });
    await started.promise;
    const rt2 = runtime(p, { model: scriptedModel(['sent']), tools: [t2] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery).toMatchObject({
      writerEpoch: 2,
      interruptedRuns: [{ runId: 'r', runEpoch: 1 }],
      uncertainToolCalls: [{ callId: 'c1', resolution: 'reconcile' }],
    });
    expect(await s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' })).toMatchObject({
      status: 'succeeded',
      finalMessage: 'sent',
    });
    expect(keys).toEqual(['s/r/1/c1', 'reconcile:s/r/1/c1']);
    const log = await logOf(rt2.store, 's');
    expect(log.find((e) => e.type === 'tool/result')!.payload.outcome).toMatchObject({ kind: 'completed', content: 'it was sent' });
    expect(log.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt', 'continue']);
    // the abandoned life is fenced: its store refuses it
    await rt1.close().catch(() => undefined);
  });
});
