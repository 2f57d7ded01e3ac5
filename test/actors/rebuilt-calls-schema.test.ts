import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel, type EventStore } from '../../src/index.js';
import { tempDir } from '../helpers/tmp.js';
import { logOf } from '../helpers/runtime.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
function dir(): string {
  const d = tempDir('actorloop-last-check-');
  cleanups.push(d.cleanup);
  return d.path;
}

/** A store that writes what the version before rawArguments wrote (no rawArguments anywhere). */
function oldWriter(inner: EventStore): EventStore {
  const strip = (d: { type: string; payload: Record<string, unknown> }) => {
    const p = { ...d.payload };
    delete p.rawArguments;
    if (Array.isArray(p.batch)) p.batch = p.batch.map((c: Record<string, unknown>) => {
      const { rawArguments: _r, ...rest } = c;
      return rest;
    });
    return { ...d, payload: p };
  };
  return {
    attachWriter: (id) => inner.attachWriter(id),
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    append: ((id: string, epoch: number, seq: number, drafts: any[], ...rest: any[]) => (inner.append as any)(id, epoch, seq, drafts.map(strip), ...rest)) as EventStore['append'],
    readEvents: (id, r) => inner.readEvents(id, r),
    loadSurface: (id) => inner.loadSurface(id),
    getHead: (id) => inner.getHead(id),
    getEventById: (id, e) => inner.getEventById(id, e),
    listSessions: () => inner.listSessions(),
    events$: (id, o) => inner.events$(id, o),
    close: () => inner.close(),
  };
}

describe('calls rebuilt from the log: arguments that no longer fit', () => {
  it('an approved call from a log written before rawArguments, whose tool schema changed since, is not executed with arguments the schema refuses', async () => {
    const path = dir();
    const executed: unknown[] = [];
    const v1 = defineTool({ name: 'transfer', description: '', needsApproval: true, parameters: z.object({ to: z.string(), amount: z.number() }), execute: () => 'paid' });
    const rt1 = createRuntime({ model: scriptedModel([{ toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME', amount: 250 } }] }]), tools: [v1], store: oldWriter(lmdbStore({ path })) });
    const s1 = await rt1.openSession('s');
    const r = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r.status).toBe('suspended');
    await rt1.close();

    const v2 = defineTool({
      name: 'transfer', description: '', needsApproval: true,
      parameters: z.object({ recipient: z.string(), amountCents: z.number().int() }),
      execute: (args) => (executed.push(args), `paid ${args.amountCents} to ${args.recipient}`),
    });
    const rt2 = createRuntime({ model: scriptedModel(['done']), tools: [v2], store: lmdbStore({ path }) });
    cleanups.unshift(async () => rt2.close());
    const s2 = await rt2.openSession('s');
    await s2.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: { decisions: { t1: 'approve' } } });
    // 4fdace0: "arguments that no longer fit the tool's schema are never run" — also for a legacy log
    expect(executed).toEqual([]);
  });

  it('an approved call whose tool was removed since the approval was asked gets a result and the run goes on', async () => {
    const path = dir();
    const v1 = defineTool({ name: 'transfer', description: '', needsApproval: true, parameters: z.object({ to: z.string() }), execute: () => 'paid' });
    const rt1 = createRuntime({ model: scriptedModel([{ toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME' } }] }]), tools: [v1], store: lmdbStore({ path }) });
    const s1 = await rt1.openSession('s');
    const r = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r.status).toBe('suspended');
    await rt1.close();

    const other = defineTool({ name: 'other', description: '', parameters: z.object({}), execute: () => 'x' });
    const store = lmdbStore({ path });
    const rt2 = createRuntime({ model: scriptedModel(['done']), tools: [other], store });
    cleanups.unshift(async () => rt2.close());
    const s2 = await rt2.openSession('s');
    const r2 = await s2.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: { decisions: { t1: 'approve' } } });
    const results = (await logOf(store, 's')).filter((e) => e.type === 'tool/result');
    expect({ status: r2.status, error: r2.error?.message, results: results.length }).toEqual({ status: 'succeeded', error: undefined, results: 1 });
  });
});
