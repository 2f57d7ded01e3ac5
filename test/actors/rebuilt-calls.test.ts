import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, scriptedModel, type EventStore } from '../../src/index.js';
import { ids, lmdbRuntime, logOf, storeWithAppend } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
function dir(): string {
  const d = tempDir('actorloop-rebuilt-calls-');
  cleanups.push(d.cleanup);
  return d.path;
}

/** A store that writes what the version before rawArguments wrote (no rawArguments anywhere). */
function oldWriter(inner: EventStore): EventStore {
  const strip = (d: { type: string; payload: Record<string, unknown> }) => {
    const p = { ...d.payload };
    delete p.rawArguments;
    if (Array.isArray(p.batch))
      p.batch = p.batch.map((c: Record<string, unknown>) => {
        const { rawArguments: _r, ...rest } = c;
        return rest;
      });
    return { ...d, payload: p };
  };
  return storeWithAppend(inner, ((id: string, epoch: number, seq: number, drafts: any[]) =>
    inner.append(id, epoch, seq, drafts.map(strip) as any)) as EventStore['append']);
}

describe('calls rebuilt from the log', () => {
  it('an approved call from a log written before rawArguments still gets the parsed (transformed) arguments', async () => {
    const path = dir();
    const got: string[] = [];
    const mk = () =>
      defineTool({
        name: 'gated',
        description: '',
        needsApproval: true,
        parameters: z.object({ at: z.string().transform((s) => new Date(s)) }),
        execute: (args) => (got.push(args.at instanceof Date ? 'Date' : typeof args.at), 'scheduled'),
      });
    // written by the previous version (suspended for approval), then the app upgrades
    const rt1 = createRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'gated', arguments: { at: '2030-01-01T00:00:00Z' } }] }]),
      tools: [mk()],
      store: oldWriter(lmdbStore({ path })),
    });
    const s1 = await rt1.openSession('s');
    const r = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r.status).toBe('suspended');
    await rt1.close();

    const rt2 = createRuntime({ model: scriptedModel(['done']), tools: [mk()], store: lmdbStore({ path }) });
    cleanups.unshift(async () => rt2.close());
    const s2 = await rt2.openSession('s');
    const r2 = await s2.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { p1: 'approve' } },
    });
    expect(r2.status).toBe('succeeded');
    // docs/guarantees.md: execute always gets the schema's parsed output, also for an approved call
    expect(got).toEqual(['Date']);
  });

  it('an approved call whose arguments no longer match the tool schema (changed since the log was written) is not executed with them', async () => {
    const path = dir();
    const executed: unknown[] = [];
    const v1 = defineTool({
      name: 'transfer',
      description: '',
      needsApproval: true,
      parameters: z.object({ to: z.string(), amount: z.number() }),
      execute: () => 'paid',
    });
    const rt1 = createRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME', amount: 250 } }] }]),
      tools: [v1],
      store: lmdbStore({ path }),
    });
    const s1 = await rt1.openSession('s');
    const r = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r.status).toBe('suspended');
    await rt1.close();

    // the app is redeployed with a new schema before the user approves
    const v2 = defineTool({
      name: 'transfer',
      description: '',
      needsApproval: true,
      parameters: z.object({ recipient: z.string(), amountCents: z.number().int() }),
      execute: (args) => (executed.push(args), `paid ${args.amountCents} to ${args.recipient}`),
    });
    const rt2 = createRuntime({ model: scriptedModel(['done']), tools: [v2], store: lmdbStore({ path }) });
    cleanups.unshift(async () => rt2.close());
    const s2 = await rt2.openSession('s');
    await s2.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { t1: 'approve' } },
    });
    // the re-parse saw the mismatch; execute must not get arguments its schema refuses
    expect(executed.filter((a) => !v2.parameters.safeParse(a).success)).toEqual([]);
  });
});

describe('outcomes the log cannot record', () => {
  it('a completed outcome whose additionalMessages carry a BigInt becomes an error result, not a failed run with the call unanswered', async () => {
    const ran: string[] = [];
    const t = defineTool({
      name: 'lookup',
      description: '',
      parameters: z.object({}),
      execute: () => (
        ran.push('x'),
        {
          kind: 'completed' as const,
          content: 'row 1',
          additionalMessages: [{ role: 'user' as const, content: 'row detail', providerData: { id: 2n ** 70n } }],
        }
      ),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'l1', name: 'lookup', arguments: {} }] }, 'found it']);
    const { runtime, store } = lmdbRuntime({ model, tools: [t] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(ran).toEqual(['x']);
    const results = (await logOf(store, 's')).filter((e) => e.type === 'tool/result').length;
    expect({ status: r.status, results }).toEqual({ status: 'succeeded', results: 1 });
  });
});

describe('calls rebuilt from the log: arguments that no longer fit', () => {
  it('an approved call from a log written before rawArguments, whose tool schema changed since, is not executed with arguments the schema refuses', async () => {
    const path = dir();
    const executed: unknown[] = [];
    const v1 = defineTool({
      name: 'transfer',
      description: '',
      needsApproval: true,
      parameters: z.object({ to: z.string(), amount: z.number() }),
      execute: () => 'paid',
    });
    const rt1 = createRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME', amount: 250 } }] }]),
      tools: [v1],
      store: oldWriter(lmdbStore({ path })),
    });
    const s1 = await rt1.openSession('s');
    const r = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r.status).toBe('suspended');
    await rt1.close();

    const v2 = defineTool({
      name: 'transfer',
      description: '',
      needsApproval: true,
      parameters: z.object({ recipient: z.string(), amountCents: z.number().int() }),
      execute: (args) => (executed.push(args), `paid ${args.amountCents} to ${args.recipient}`),
    });
    const rt2 = createRuntime({ model: scriptedModel(['done']), tools: [v2], store: lmdbStore({ path }) });
    cleanups.unshift(async () => rt2.close());
    const s2 = await rt2.openSession('s');
    await s2.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { t1: 'approve' } },
    });
    // 4fdace0: "arguments that no longer fit the tool's schema are never run" — also for a legacy log
    expect(executed).toEqual([]);
  });

  it('an approved call whose tool was removed since the approval was asked gets a result and the run goes on', async () => {
    const path = dir();
    const v1 = defineTool({
      name: 'transfer',
      description: '',
      needsApproval: true,
      parameters: z.object({ to: z.string() }),
      execute: () => 'paid',
    });
    const rt1 = createRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME' } }] }]),
      tools: [v1],
      store: lmdbStore({ path }),
    });
    const s1 = await rt1.openSession('s');
    const r = await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' });
    expect(r.status).toBe('suspended');
    await rt1.close();

    const other = defineTool({ name: 'other', description: '', parameters: z.object({}), execute: () => 'x' });
    const store = lmdbStore({ path });
    const rt2 = createRuntime({ model: scriptedModel(['done']), tools: [other], store });
    cleanups.unshift(async () => rt2.close());
    const s2 = await rt2.openSession('s');
    const r2 = await s2.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { t1: 'approve' } },
    });
    const results = (await logOf(store, 's')).filter((e) => e.type === 'tool/result');
    expect({ status: r2.status, error: r2.error?.message, results: results.length }).toEqual({
      status: 'succeeded',
      error: undefined,
      results: 1,
    });
  });
});

describe('approved calls get parsed arguments', () => {
  it('an approved call gets the same parsed (transformed) arguments as an unapproved one', async () => {
    const got: { path: string; isDate: boolean; type: string }[] = [];
    const params = z.object({ at: z.string().transform((s) => new Date(s)) });
    const mk = (name: string, needsApproval: boolean) =>
      defineTool({
        name,
        description: '',
        parameters: params,
        needsApproval,
        execute: (args) => (got.push({ path: name, isDate: args.at instanceof Date, type: typeof args.at }), 'scheduled'),
      });
    const model = scriptedModel([
      { toolCalls: [{ id: 'p1', name: 'free', arguments: { at: '2030-01-01T00:00:00Z' } }] },
      { toolCalls: [{ id: 'p2', name: 'gated', arguments: { at: '2030-01-01T00:00:00Z' } }] },
      'done',
    ]);
    const { runtime } = lmdbRuntime({ model, tools: [mk('free', false), mk('gated', true)] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r.status).toBe('suspended');
    const r2 = await s.execute({
      kind: 'respond',
      runId: 'r',
      attemptId: 'a2',
      questionId: r.pendingRequest!.questionId,
      answer: { decisions: { p2: 'approve' } },
    });
    expect(r2.status).toBe('succeeded');
    // without approval the tool sees a Date (zod's output); after approval it must see the same
    expect(got).toEqual([
      { path: 'free', isDate: true, type: 'object' },
      { path: 'gated', isDate: true, type: 'object' },
    ]);
  });
});
