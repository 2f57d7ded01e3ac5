import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { z } from 'zod';
import type { SessionServices } from '../../src/actors/session-services.js';
import { toolCallActor } from '../../src/actors/tool-call.js';
import { defineTool, scriptedModel } from '../../src/index.js';
import type { AnyTool } from '../../src/tools/define-tool.js';
import { deferred } from '../helpers/drafts.js';
import { systemClock } from '../../src/contracts/clock.js';
import { isCancelledError, isValidationError } from '../../src/contracts/errors.js';
import { ids, lmdbRuntime, logOf, sleep, within } from '../helpers/runtime.js';
import { LogWriter } from '../../src/persistence/log-writer.js';
import { memoryStore } from '../../src/persistence/memory-store.js';
import { SessionProjection } from '../../src/persistence/projection.js';
import type { EventStore } from '../../src/persistence/event-store.js';

/** Just what a tool-call actor reaches of the session's environment. */
function fakeEnv(checkFenced: () => Promise<boolean>) {
  return {
    sessionId: 's1',
    writer: { checkFenced, fencedNow: () => undefined, mayStartEffect: () => true },
    clock: systemClock,
    config: { cancelGraceMs: 50 },
    emit: () => {},
    callSeqs: new Map(),
  } as unknown as SessionServices;
}

/** A call of the exclusive tool `pay`, which runs `execute`. */
const payCall = (execute: (args: unknown, ctx: { signal: AbortSignal }) => Promise<string>) => ({
  runId: 'r1',
  index: 0,
  call: { callId: 'c1', name: 'pay', arguments: {}, mode: 'exclusive' as const, resources: [], idempotencyKey: 's1/r1/c1' },
  tool: { name: 'pay', mode: 'exclusive', execute } as unknown as AnyTool,
});

describe('toolCallActor', () => {
  it('a call stopped while its fence check is pending never starts its tool', async () => {
    const fence = deferred<boolean>();
    const started: unknown[] = [];
    const actor = createActor(toolCallActor(fakeEnv(() => fence.promise)), {
      input: payCall(async (a) => (started.push(a), 'paid')),
    }).start();
    actor.stop();
    fence.resolve(false);
    await new Promise((r) => setTimeout(r, 10));
    expect(started).toEqual([]);
  });

  it('a stopped call aborts its running tool with an AbortError', async () => {
    const reason = deferred<unknown>();
    const execute = (_: unknown, { signal }: { signal: AbortSignal }) =>
      new Promise<string>((_, reject) =>
        signal.addEventListener('abort', () => (reason.resolve(signal.reason), reject(signal.reason)), { once: true }),
      );
    const actor = createActor(toolCallActor(fakeEnv(async () => false)), { input: payCall(execute) }).start();
    await new Promise((r) => setTimeout(r, 5));
    actor.stop();
    expect(await reason.promise).toMatchObject({ name: 'AbortError' });
  });
});

describe('toolCallActor lease', () => {
  it('an exclusive call whose lease runs out while its fence is read never starts its tool', async () => {
    const base = memoryStore();
    let leaseLost = false;
    // the head read returns after the lease ran out (a worker paused right after the read); the
    // wrapper has no synchronous epoch read, so the writer reads the head
    const store = new Proxy(base, {
      get: (t, p) =>
        p === 'getHead'
          ? async (id: string) => {
              const h = await t.getHead(id);
              leaseLost = true;
              return h;
            }
          : p === 'writerEpochNow'
            ? undefined
            : Reflect.get(t, p),
    }) as EventStore;
    const attach = await base.attachWriter('s1');
    const writer = new LogWriter(store, 's1', attach.writerEpoch, attach.lastSeq + 1, new SessionProjection());
    writer.guard = () => (leaseLost ? new Error('lease lost') : undefined);
    const started: unknown[] = [];
    const env = { ...fakeEnv(async () => false), writer } as unknown as SessionServices;
    createActor(toolCallActor(env), { input: payCall(async (a) => (started.push(a), 'paid')) }).start();
    await new Promise((r) => setTimeout(r, 20));
    expect(leaseLost).toBe(true);
    expect(started).toEqual([]);
    await base.close();
  });
});

describe('toolCallActor signal', () => {
  it('a tool that first reads its signal after the call was cancelled sees it aborted, with the reason', async () => {
    const seen = deferred<{ aborted: boolean; reason: unknown }>();
    const release = deferred<void>();
    const execute = async (_: unknown, ctx: { signal: AbortSignal }) => {
      await release.promise;
      seen.resolve({ aborted: ctx.signal.aborted, reason: ctx.signal.reason });
      return 'late';
    };
    const actor = createActor(toolCallActor(fakeEnv(async () => false)), { input: payCall(execute) }).start();
    await new Promise((r) => setTimeout(r, 5));
    actor.send({ type: 'CANCEL', reason: 'requestCancel' });
    release.resolve();
    const got = await seen.promise;
    expect(got.aborted).toBe(true);
    expect(isCancelledError(got.reason)).toBe(true);
    expect((got.reason as Error).message).toBe('requestCancel');
  });
});

describe('toolCallActor context', () => {
  it('a tool that copies its context ({ ...ctx }) keeps a live signal', async () => {
    const got = deferred<AbortSignal | undefined>();
    const execute = async (_: unknown, ctx: { signal: AbortSignal }) => {
      const copy = { ...ctx };
      got.resolve(copy.signal);
      return 'ok';
    };
    createActor(toolCallActor(fakeEnv(async () => false)), { input: payCall(execute) }).start();
    const signal = await got.promise;
    expect(signal).toBeInstanceOf(AbortSignal);
    expect(signal!.aborted).toBe(false);
  });
});

describe('what a tool may throw or return', () => {
  it('a tool rejecting with a null-prototype object gets an error result (the run does not hang)', async () => {
    const odd = defineTool({
      name: 'odd',
      description: '',
      parameters: z.object({}),
      // e.g. an error object built with Object.create(null) by a parser / RPC library
      execute: async () => {
        throw Object.assign(Object.create(null), { code: 'E_ODD' });
      },
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'o1', name: 'odd', arguments: {} }] }, 'sorry']);
    const { runtime, store } = lmdbRuntime({ model, tools: [odd] });
    const s = await runtime.openSession('s');
    const r = await within(s.execute({ kind: 'prompt', ...ids(), message: 'go' }), 3000);
    // DESIGN §4.5: a throw becomes `completed` with isError: true
    expect(r).not.toBe('still pending');
    const result = (await logOf(store, 's')).find((e) => e.type === 'tool/result');
    expect(result?.payload.outcome).toMatchObject({ kind: 'completed', isError: true });
  });

  it('a completed outcome whose `structured` is not JSON is recorded and the call answered', async () => {
    const ran: string[] = [];
    const lookup = defineTool({
      name: 'lookup',
      description: '',
      parameters: z.object({}),
      execute: () => (ran.push('x'), { kind: 'completed', content: 'row 1', structured: { id: 2n ** 70n } }),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 'l1', name: 'lookup', arguments: {} }] }, 'found it']);
    const { runtime, store } = lmdbRuntime({ model, tools: [lookup] });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(ran).toEqual(['x']);
    const log = await logOf(store, 's');
    // the tool ran (its effect happened): its result must be committed and the run go on
    const results = log.filter((e) => e.type === 'tool/result').length;
    // and the session's surface must not keep an assistant tool call without its result (the
    // providers refuse such a history with a 400 on every later request)
    await s.execute({ kind: 'prompt', ...ids(), message: 'again' });
    const sent = model.requests[1]!.messages;
    const answered = new Set(sent.filter((m) => m.role === 'tool').map((m) => m.toolCallId));
    const unanswered = sent
      .flatMap((m) => m.toolCalls ?? [])
      .filter((c) => !answered.has(c.id))
      .map((c) => c.id);
    expect({ status: r.status, results, unanswered }).toEqual({ status: 'succeeded', results: 1, unanswered: [] });
  });
});

describe('ctx.emit', () => {
  it('an emit after the call has ended publishes no tool_update after its tool_end', async () => {
    let late: (() => void) | undefined;
    const t = defineTool({
      name: 't',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      // e.g. a progress callback of a client library that fires once more after the call resolved
      execute: (_a, ctx) => ((late = () => ctx.emit({ progress: 100 })), 'ok'),
    });
    const model = scriptedModel([{ toolCalls: [{ id: 't1', name: 't', arguments: {} }] }, 'done']);
    const { runtime } = lmdbRuntime({ model, tools: [t] });
    const s = await runtime.openSession('s');
    const seen: string[] = [];
    s.events$.subscribe(
      (e) => void (e.event.type.startsWith('tool_') || e.event.type === 'execution_finished' ? seen.push(e.event.type) : undefined),
    );
    await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    late!();
    await sleep(20);
    expect(seen).toEqual(['tool_start', 'tool_end', 'execution_finished']);
  });

  it('an emit of a value that is not JSON (a BigInt, a cycle) throws a ValidationError to the tool at once and publishes nothing', async () => {
    const refused: unknown[] = [];
    const t = defineTool({
      name: 't',
      description: '',
      mode: 'parallel',
      parameters: z.object({}),
      execute: (_a, ctx) => {
        const cyclic: Record<string, unknown> = {};
        cyclic.self = cyclic;
        for (const bad of [{ big: 10n }, cyclic, undefined])
          try {
            ctx.emit(bad);
          } catch (e) {
            refused.push(e);
          }
        ctx.emit({ progress: 1 });
        return 'ok';
      },
    });
    const model = scriptedModel([{ toolCalls: [{ id: 't1', name: 't', arguments: {} }] }, 'done']);
    const { runtime } = lmdbRuntime({ model, tools: [t] });
    const s = await runtime.openSession('s');
    const updates: unknown[] = [];
    // a listener that serializes what it gets, as a web stream does: it never meets a BigInt
    s.subscribe((e) => void (e.event.type === 'tool_update' ? updates.push(JSON.parse(JSON.stringify(e.event.update))) : undefined));
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    expect(refused.map((e) => isValidationError(e) && e.issues[0]!.path)).toEqual([['big'], ['self'], []]);
    expect(String(refused[0])).toContain('ctx.emit');
    expect(updates).toEqual([{ progress: 1 }]);
  });
});

describe('what a tool may return', () => {
  const returning = (value: () => unknown) =>
    defineTool({ name: 'give', description: '', mode: 'parallel', parameters: z.object({}), execute: value as () => string });
  async function outcomeOf(value: () => unknown) {
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ id: 'g1', name: 'give', arguments: {} }] }, 'done']),
      tools: [returning(value)],
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    const log = await logOf(store, 's');
    const text = s.snapshot().messages.find((m) => m.role === 'tool')!.content;
    await runtime.close();
    return { r, outcome: log.find((e) => e.type === 'tool/result')!.payload.outcome as Record<string, unknown>, text };
  }

  it.each([
    ['a number', () => 42, '42'],
    ['a boolean', () => false, 'false'],
    ['null', () => null, 'null'],
    ['an array', () => [1, 'two', { three: 3 }], '[1,"two",{"three":3}]'],
    ['a plain object', () => ({ temperature: 21.5, unit: 'C' }), '{"temperature":21.5,"unit":"C"}'],
    ['an object with a kind that is not an outcome kind', () => ({ kind: 'weather', sunny: true }), '{"kind":"weather","sunny":true}'],
  ])('%s is serialised for the model and kept as structured content', async (_what, value, text) => {
    const { r, outcome, text: seen } = await outcomeOf(value);
    expect(r.status).toBe('succeeded');
    expect(outcome).toEqual({
      kind: 'completed',
      content: text,
      structured: value(),
      isError: false,
      concludesTurn: false,
      releaseResources: [],
    });
    expect(seen).toBe(text);
  });

  it('a string is the text as it is, a tool outcome is that outcome', async () => {
    expect((await outcomeOf(() => 'plain')).outcome).toMatchObject({ kind: 'completed', content: 'plain', isError: false });
    expect((await outcomeOf(() => ({ kind: 'completed', content: 'sent', structured: { id: 7 } }))).outcome).toMatchObject({
      kind: 'completed',
      content: 'sent',
      structured: { id: 7 },
    });
  });

  it.each([
    ['undefined', () => undefined, /tool give returned no value \(undefined\)/],
    ['a BigInt', () => 10n, /tool give returned a value that is not JSON: .*BigInt/],
    ['a Date inside an object', () => ({ at: new Date(0) }), /tool give returned a value that is not JSON \(at at\): .*Date/],
    [
      'a cycle',
      () => {
        const o: Record<string, unknown> = {};
        o.self = o;
        return o;
      },
      /tool give returned a value that is not JSON/,
    ],
    ['a function', () => () => 1, /tool give returned a value that is not JSON: .*function/],
    ['an invalid outcome', () => ({ kind: 'completed', content: 5 }), /tool give returned an invalid outcome/],
  ])('%s is an error result naming the tool', async (_what, value, message) => {
    const { outcome, text } = await outcomeOf(value);
    expect(outcome).toMatchObject({ kind: 'completed', isError: true });
    expect(outcome.content).toMatch(message);
    expect(text).toMatch(/^Error: tool give returned/);
  });
});
