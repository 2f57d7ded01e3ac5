import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  scriptedModel,
  type EventDraft,
  type EventStore,
  type ExecutionSession,
  type ModelProvider,
  type Runtime,
} from '../../src/index.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { collect } from '../helpers/drafts.js';
import { localStores } from '../helpers/backends.js';
import { expectValidation } from '../helpers/validation.js';

// One id rule for every id an app gives a store, on every backend (docs/guarantees.md, "Bad
// input"): non-empty, no NUL, no lone surrogate (well-formed Unicode), within the field's length
// limit. A bad id is a ValidationError naming the field, at the public boundary, with nothing
// written — on memory, LMDB and PostgreSQL alike (PostgreSQL's text cannot hold a NUL, and turns
// a lone surrogate into U+FFFD).

const BAD_IDS: [string, string][] = [
  ['empty', ''],
  ['a NUL', 'a\u0000b'],
  ['a lone high surrogate', '\ud800'],
  ['a lone low surrogate inside', 'x\udc00y'],
];

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

const backends = localStores(cleanups);
const db = await postgresForTests('the id rule (postgres)');
if (db) backends.push(['postgres', () => postgresStore({ connectionString: db.url, schema: freshSchema('ids') })]);

interface Ctx {
  store: EventStore;
  runtime: Runtime;
  session: ExecutionSession;
  /** A writer epoch of session `direct`, attached by hand (for store.append). */
  directEpoch: number;
}

const step = (eventId?: string): EventDraft => ({
  ...(eventId !== undefined ? { eventId } : {}),
  type: 'step/start',
  turn: 0,
  step: 0,
  attempt: 0,
  surfaceOp: 'none',
  payload: {},
});

/** Every public call that takes an id from the app: what it is, the field it names, and the call with `bad` there. */
const CASES: [string, string, (c: Ctx, bad: string) => unknown][] = [
  ['runtime.openSession', 'sessionId', (c, bad) => c.runtime.openSession(bad)],
  ['runtime.run', 'sessionId', (c, bad) => c.runtime.run('hi', { sessionId: bad })],
  ['runtime.submit', 'sessionId', (c, bad) => c.runtime.submit(bad, 'hi')],
  ['runtime.submit input', 'inputId', (c, bad) => c.runtime.submit('s1', { kind: 'input', inputId: bad, mode: 'follow_up', message: 'x' })],
  ['runtime.submit respond', 'entryId', (c, bad) => c.runtime.submit('s1', { kind: 'respond', entryId: bad, questionId: 'q', answer: 1 })],
  [
    'runtime.submit respond',
    'questionId',
    (c, bad) => c.runtime.submit('s1', { kind: 'respond', entryId: 'e', questionId: bad, answer: 1 }),
  ],
  [
    'runtime.submit respond',
    'runId',
    (c, bad) => c.runtime.submit('s1', { kind: 'respond', entryId: 'e', runId: bad, questionId: 'q', answer: 1 }),
  ],
  ['runtime.submit cancel', 'entryId', (c, bad) => c.runtime.submit('s1', { kind: 'cancel', entryId: bad })],
  ['runtime.submit cancel_input', 'inputId', (c, bad) => c.runtime.submit('s1', { kind: 'cancel_input', entryId: 'e', inputId: bad })],
  ['runtime.waitForResult', 'runId', (c, bad) => c.runtime.waitForResult('s1', bad, { signal: AbortSignal.timeout(5000) })],
  ['runtime.serve', 'workerId', (c, bad) => c.runtime.serve({ workerId: bad })],
  ['session.execute prompt', 'runId', (c, bad) => c.session.execute({ kind: 'prompt', runId: bad, attemptId: 'a', message: 'x' })],
  ['session.execute prompt', 'attemptId', (c, bad) => c.session.execute({ kind: 'prompt', runId: 'r', attemptId: bad, message: 'x' })],
  ['session.execute respond', 'questionId', (c, bad) => c.session.execute({ kind: 'respond', questionId: bad, answer: 1 })],
  ['session.execute continue', 'runId', (c, bad) => c.session.execute({ kind: 'continue', runId: bad })],
  ['session.run', 'runId', (c, bad) => c.session.run({ kind: 'prompt', runId: bad, message: 'x' })],
  ['session.submitInput', 'inputId', (c, bad) => c.session.submitInput({ inputId: bad, message: 'x', mode: 'follow_up' })],
  ['session.cancelInput', 'inputId', (c, bad) => c.session.cancelInput(bad)],
  ['session.approve', 'callId', (c, bad) => c.session.approve(bad)],
  ['session.deny', 'callId', (c, bad) => c.session.deny(bad)],
  ['session.releaseResources', 'keys', (c, bad) => c.session.releaseResources([bad])],
  [
    'session.stopAfterCurrentToolRound',
    'idempotencyKey',
    (c, bad) =>
      c.session.stopAfterCurrentToolRound({
        sessionId: 's1',
        sessionInstanceId: c.session.sessionInstanceId,
        interactionId: 'r',
        expectedRunEpoch: 1,
        idempotencyKey: bad,
      }),
  ],
  [
    'session.loadCheckpoint (a tool call id)',
    'toolCalls.0.id',
    (c, bad) =>
      c.session.loadCheckpoint({
        messages: [
          { role: 'assistant', content: '', toolCalls: [{ id: bad, name: 'f', arguments: '{}' }] },
          { role: 'tool', content: 'ok', toolCallId: bad },
        ],
      }),
  ],
  [
    'createRuntime bootstrapMessages (a tool call id)',
    'toolCalls.0.id',
    (c, bad) =>
      createRuntime({
        store: c.store,
        model: scriptedModel(['x']),
        bootstrapMessages: [
          { role: 'assistant', content: '', toolCalls: [{ id: bad, name: 'f', arguments: '{}' }] },
          { role: 'tool', content: 'ok', toolCallId: bad },
        ],
      }),
  ],
  [
    'createRuntime rateLimits (a provider name, a bucket key)',
    'provider',
    (c, bad) => createRuntime({ store: c.store, model: scriptedModel(['x']), rateLimits: [{ provider: bad, concurrent: 1 }] }),
  ],
  [
    'scriptedModel (a tool call id)',
    'toolCalls.0.id',
    (_c, bad) => scriptedModel([{ toolCalls: [{ id: bad, name: 'f', arguments: {} }] }]),
  ],
  ['store.append', 'eventId', (c, bad) => c.store.append('direct', c.directEpoch, 1, [step(bad)])],
  [
    'store.append (an id in a payload)',
    'inputId',
    (c, bad) =>
      c.store.append('direct', c.directEpoch, 1, [
        {
          type: 'input/accepted',
          turn: 0,
          step: 0,
          attempt: 0,
          surfaceOp: 'none',
          payload: { inputId: bad, mode: 'follow_up', messages: [{ role: 'user', content: 'x' }] },
        },
      ]),
  ],
  [
    'store.append (a resource key)',
    'resources',
    (c, bad) =>
      c.store.append('direct', c.directEpoch, 1, [
        {
          type: 'tool/call',
          turn: 1,
          step: 1,
          attempt: 1,
          surfaceOp: 'none',
          payload: { callId: 'c1', name: 'f', arguments: {}, mode: 'exclusive', resources: [bad], idempotencyKey: 'k' },
        },
      ]),
  ],
  ['store.getEventById', 'eventId', (c, bad) => c.store.getEventById('s1', bad)],
  ['store.work.getEntry', 'entryId', (c, bad) => c.store.work!.getEntry('s1', bad)],
  [
    'store.work.submit',
    'inputId',
    (c, bad) => c.store.work!.submit('s1', { kind: 'input', inputId: bad, mode: 'follow_up', message: 'x' }),
  ],
];

/** Everything a store holds that a call could have added: sessions, their logs, inboxes, leases, workers. */
async function contents(store: EventStore) {
  const sessions = (await store.listSessions()).sort();
  const logs = await Promise.all(
    sessions.map(async (s) => (await collect(store.readEvents(s))).map((e) => `${e.seq} ${e.type} ${e.eventId}`)),
  );
  const inbox = await Promise.all(sessions.map(async (s) => (await store.work!.pending(s)).map((e) => e.entryId)));
  const leases = (await store.work!.listLeases()).map((l) => l.sessionId);
  const workers = (await store.work!.listWorkers()).map((w) => w.workerId);
  return { sessions, logs, inbox, leases, workers };
}

describe.each(backends)('a bad id is a ValidationError naming its field, with nothing written (%s)', (_name, makeStore) => {
  let ctx: Ctx;
  beforeAll(async () => {
    const store = makeStore();
    const runtime = createRuntime({ store, model: scriptedModel(['answer'], { loop: true }) });
    cleanups.push(() => runtime.close());
    const session = await runtime.openSession('s1');
    expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })).status).toBe('succeeded');
    const { writerEpoch } = await store.attachWriter('direct');
    ctx = { store, runtime, session, directEpoch: writerEpoch };
  });

  it.each(CASES)('%s: %s', async (_call, field, call) => {
    for (const [what, bad] of BAD_IDS) {
      const before = await contents(ctx.store);
      await expectValidation(() => call(ctx, bad), field).catch((e: Error) => {
        throw new Error(`${what} (${JSON.stringify(bad)}): ${e.message}`);
      });
      expect(await contents(ctx.store), `${what}: nothing written`).toEqual(before);
    }
    // the session still runs
    const next = await ctx.session.run('again').result;
    expect(next.status).toBe('succeeded');
  });
});

describe.each(backends)('a tool call id from the model follows the id rule too (%s)', (_name, makeStore) => {
  it('a response whose call id breaks it fails the model call (invalid_response): no tool runs, no tool/call is written', async () => {
    for (const [what, bad] of BAD_IDS) {
      const store = makeStore();
      let ran = 0;
      const echo = defineTool({ name: 'echo', description: '', parameters: z.object({}), execute: () => String(++ran) });
      const model: ModelProvider = {
        modelId: 'custom',
        call: async () => ({
          message: { role: 'assistant', content: '', toolCalls: [{ id: bad, name: 'echo', arguments: '{}' }] },
          finishReason: 'tool_calls',
        }),
      };
      const runtime = createRuntime({ store, model, tools: [echo] });
      cleanups.push(() => runtime.close());
      const s = await runtime.openSession('s1');
      const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
      expect({ what, status: r.status, code: (r.error?.cause as { providerCode?: string }).providerCode }).toEqual({
        what,
        status: 'failed',
        code: 'invalid_response',
      });
      expect(ran).toBe(0);
      const types = (await collect(store.readEvents('s1'))).map((e) => e.type);
      expect(types).not.toContain('tool/call');
      expect(types).not.toContain('assistant/message');
    }
  });
});

describe.each(backends)('ids with emoji, spaces and accents are kept exactly (%s)', (_name, makeStore) => {
  it('a session, run, attempt, input, inbox entry, tool call and event id of unusual characters work', async () => {
    const store = makeStore();
    const runtime = createRuntime({ store, model: scriptedModel(['answer'], { loop: true }) });
    cleanups.push(() => runtime.close());
    const sid = 'séance 🦊 one';
    const s = await runtime.openSession(sid);
    const r = await s.execute({ kind: 'prompt', runId: 'run é 🦊', attemptId: 'a t 1', message: 'hi' });
    expect(r).toMatchObject({ runId: 'run é 🦊', attemptId: 'a t 1', status: 'succeeded' });
    expect(await s.submitInput({ inputId: 'in put é', message: 'later', mode: 'follow_up' })).toMatchObject({
      inputId: 'in put é',
      durability: 'durable',
    });
    await s.waitForIdle();
    expect(await runtime.waitForResult(sid, 'in put é', { signal: AbortSignal.timeout(10_000) })).toMatchObject({ status: 'succeeded' });
    const receipt = await runtime.submit(sid, { kind: 'input', inputId: 'inbox 🦊 é', mode: 'follow_up', message: 'queued' });
    expect(receipt).toMatchObject({ entryId: 'inbox 🦊 é', status: 'accepted' });
    expect(await runtime.waitForResult(sid, 'inbox 🦊 é', { signal: AbortSignal.timeout(10_000) })).toMatchObject({ status: 'succeeded' });
    await s.loadCheckpoint({
      messages: [
        { role: 'assistant', content: '', toolCalls: [{ id: 'call 🦊 é', name: 'f', arguments: '{}' }] },
        { role: 'tool', content: 'ok', toolCallId: 'call 🦊 é' },
      ],
    });
    expect(s.snapshot().messages.at(-1)).toMatchObject({ toolCallId: 'call 🦊 é' });
    // an app's own event id, found again by it
    const { writerEpoch } = await store.attachWriter('direct é');
    await store.append('direct é', writerEpoch, 1, [step('ev 🦊 é')]);
    expect(await store.getEventById('direct é', 'ev 🦊 é')).toMatchObject({ eventId: 'ev 🦊 é', seq: 1 });
    expect((await store.listSessions()).sort()).toEqual(['direct é', sid].sort());
  });
});
