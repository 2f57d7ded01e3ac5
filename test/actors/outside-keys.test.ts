import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, scriptedModel, type EventStore } from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { deferred } from '../helpers/drafts.js';
import { backends, PROTO_KEYS, within } from '../helpers/backends.js';
import { logOf } from '../helpers/runtime.js';

/**
 * Outside data is never a property name: call ids, tool names, input ids, resource keys and
 * argument keys such as `constructor` or `__proto__` are looked up as what they are, on both
 * stores — a run with them settles, nothing is found that was never recorded.
 */

const SETTLE_MS = 10_000;
const hang = () => new Promise<string>(() => {});

const resultsByCall = (log: EventRecord[]) => log.filter((e) => e.type === 'tool/result').map((e) => e.payload.callId as string);

async function expectOneResultPerCall(store: EventStore, sessionId: string) {
  const log = await logOf(store, sessionId);
  const calls = log.filter((e) => e.type === 'tool/call').map((e) => e.payload.callId as string);
  const results = resultsByCall(log);
  for (const id of calls) expect(results.filter((r) => r === id)).toHaveLength(1);
  expect(log.filter((e) => e.type === 'run/end').length).toBeGreaterThan(0);
  return log;
}

describe.each(['memory', 'lmdb'] as const)('outside keys (%s store)', (kind) => {
  it.each(['parallel', 'exclusive'] as const)(
    '%s tool calls whose ids are prototype property names each run once and the run settles',
    async (mode) => {
      const b = backends[kind]();
      const ran: string[] = [];
      const echo = defineTool({
        name: 'echo',
        description: '',
        mode,
        parameters: z.object({ text: z.string() }),
        execute: ({ text }, ctx) => (ran.push(ctx.callId), text),
      });
      const model = scriptedModel([{ toolCalls: PROTO_KEYS.map((id) => ({ id, name: 'echo', arguments: { text: id } })) }, 'done']);
      const rt = b.rt({ model, tools: [echo] });
      const s = await rt.openSession('s');
      const r = await within(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' }), SETTLE_MS, 'execute');
      expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'done' });
      expect(ran.sort()).toEqual([...PROTO_KEYS].sort());
      const log = await expectOneResultPerCall(rt.store, 's');
      expect(resultsByCall(log)).toEqual([...PROTO_KEYS]);
      // the model reads each result under its own call id
      expect(model.requests[1]!.messages.filter((m) => m.role === 'tool').map((m) => [m.toolCallId, m.content])).toEqual(
        PROTO_KEYS.map((k) => [k, k]),
      );
    },
  );

  it('a call named constructor that hangs is cancelled by requestCancel: the run settles cancelled', async () => {
    const b = backends[kind]();
    const started = deferred();
    const stuck = defineTool({
      name: 'stuck',
      description: '',
      parameters: z.object({}),
      execute: async (_a, ctx) => {
        started.resolve();
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
        return 'stopped';
      },
    });
    const rt = b.rt({ model: scriptedModel([{ toolCalls: [{ id: 'constructor', name: 'stuck', arguments: {} }] }]), tools: [stuck] });
    const s = await rt.openSession('s');
    const running = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await started.promise;
    expect(await s.requestCancel()).toBe(true);
    expect(await within(running, SETTLE_MS, 'execute after requestCancel')).toMatchObject({ status: 'cancelled' });
    await expectOneResultPerCall(rt.store, 's');
  });

  it('tools named like prototype properties are found by name; an unknown such name is rejected, never called', async () => {
    const b = backends[kind]();
    const named = ['constructor', 'toString', 'hasOwnProperty', 'valueOf', '__proto__'];
    const ran: string[] = [];
    const tools = named.map((name) =>
      defineTool({ name, description: '', mode: 'parallel', parameters: z.object({}), execute: () => (ran.push(name), `I am ${name}`) }),
    );
    const model = scriptedModel([
      { toolCalls: named.map((name, i) => ({ id: `c${i}`, name, arguments: {} })) },
      { toolCalls: [{ id: 'u1', name: 'isPrototypeOf', arguments: {} }] },
      'done',
    ]);
    const rt = b.rt({ model, tools });
    const s = await rt.openSession('s');
    expect(await within(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' }), SETTLE_MS, 'execute')).toMatchObject({
      status: 'succeeded',
    });
    expect(ran.sort()).toEqual([...named].sort());
    const log = await logOf(rt.store, 's');
    const rejected = log.find((e) => e.type === 'tool/batch-rejected')!.payload.issues as { message: string }[];
    expect(rejected[0]!.message).toContain('unknown tool "isPrototypeOf"');
    // a runtime with no tools at all: a call to `constructor` is unknown, not Object
    const rt2 = backends[kind]().rt({ model: scriptedModel([{ toolCalls: [{ id: 'x', name: 'constructor', arguments: {} }] }, 'ok']) });
    const s2 = await rt2.openSession('s');
    expect(await within(s2.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' }), SETTLE_MS, 'execute')).toMatchObject({
      status: 'succeeded',
    });
    expect((await logOf(rt2.store, 's')).find((e) => e.type === 'tool/batch-rejected')!.payload.issues).toMatchObject([
      { message: expect.stringContaining('unknown tool "constructor"') },
    ]);
  });

  it('argument keys named like prototype properties reach the tool as data; __proto__ never re-links the arguments', async () => {
    const b = backends[kind]();
    const seen: unknown[] = [];
    const keys = defineTool({
      name: 'keys',
      description: '',
      parameters: z.object({ constructor: z.string(), toString: z.string(), hasOwnProperty: z.number(), valueOf: z.boolean() }),
      execute: (args) => (seen.push(args), 'ok'),
    });
    const args = '{"constructor":"c","toString":"t","hasOwnProperty":1,"valueOf":true,"__proto__":{"polluted":"yes"}}';
    const rt = b.rt({ model: scriptedModel([{ toolCalls: [{ id: 'k', name: 'keys', arguments: args }] }, 'done']), tools: [keys] });
    const s = await rt.openSession('s');
    expect(await within(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' }), SETTLE_MS, 'execute')).toMatchObject({
      status: 'succeeded',
    });
    expect(seen).toEqual([{ constructor: 'c', toString: 't', hasOwnProperty: 1, valueOf: true }]);
    expect(Object.getPrototypeOf(seen[0])).toBe(Object.prototype);
    expect(({} as { polluted?: string }).polluted).toBeUndefined();
    // the model's own text is logged as it was sent
    const msg = (await logOf(rt.store, 's')).find((e) => e.type === 'assistant/message')!.payload.message as {
      toolCalls: { arguments: string }[];
    };
    expect(msg.toolCalls[0]!.arguments).toBe(args);
  });

  it('input ids named like prototype properties are accepted, deduplicated, cancelled and consumed as their own', async () => {
    const b = backends[kind]();
    const rt = b.rt({ model: scriptedModel(['one', 'two', 'three', 'four'], { loop: true }) });
    const s = await rt.openSession('s');
    for (const inputId of PROTO_KEYS)
      expect(await s.submitInput({ inputId, message: `from ${inputId}`, mode: 'follow_up' })).toMatchObject({
        inputId,
        status: expect.any(String),
      });
    // the same id again: the same input, not a second one
    expect(await s.submitInput({ inputId: 'constructor', message: 'from constructor', mode: 'follow_up' })).toMatchObject({
      inputId: 'constructor',
    });
    await s.cancelInput('toString').catch(() => undefined); // may already be consumed: either way, no hang
    await within(s.waitForIdle(), SETTLE_MS, 'waitForIdle');
    const log = await logOf(rt.store, 's');
    const accepted = log.filter((e) => e.type === 'input/accepted').map((e) => e.payload.inputId);
    expect(accepted).toEqual([...PROTO_KEYS]);
    const runs = log.filter((e) => e.type === 'run/start').map((e) => e.payload.inputId);
    for (const id of runs) expect(PROTO_KEYS).toContain(id);
    expect(new Set(runs).size).toBe(runs.length);
    const cancelled = log.some((e) => e.type === 'input/cancelled' && e.payload.inputId === 'toString');
    expect(runs.includes('toString')).toBe(!cancelled);
  });

  it('approvals keyed by such call ids: each decision applies to its own call, a missing one is a denial', async () => {
    const b = backends[kind]();
    const ran: string[] = [];
    const pay = defineTool({
      name: 'pay',
      description: '',
      mode: 'parallel',
      needsApproval: true,
      parameters: z.object({}),
      execute: (_a, ctx) => (ran.push(ctx.callId), 'paid'),
    });
    const rt = b.rt({
      model: scriptedModel([{ toolCalls: PROTO_KEYS.map((id) => ({ id, name: 'pay', arguments: {} })) }, 'done']),
      tools: [pay],
    });
    const s = await rt.openSession('s');
    const r = await within(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' }), SETTLE_MS, 'prompt');
    expect(r.pendingRequest).toMatchObject({ kind: 'approval', calls: PROTO_KEYS.map((callId) => ({ callId })) });
    // approve __proto__ and toString (own keys, as JSON.parse makes them); valueOf denied; the rest left out
    const decisions = JSON.parse('{"__proto__":"approve","toString":"approve","valueOf":"deny"}');
    const r2 = await within(
      s.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r.pendingRequest!.questionId, answer: { decisions } }),
      SETTLE_MS,
      'respond',
    );
    expect(r2).toMatchObject({ status: 'succeeded' });
    expect(ran.sort()).toEqual(['__proto__', 'toString']);
    const log = await expectOneResultPerCall(rt.store, 's');
    const decided = log.find((e) => e.type === 'approval/decided')!.payload.decisions as Record<string, string>;
    expect(Object.entries(decided).sort()).toEqual([
      ['__proto__', 'approve'],
      ['constructor', 'deny'],
      ['hasOwnProperty', 'deny'],
      ['toString', 'approve'],
      ['valueOf', 'deny'],
    ]);
  });

  it('a crash while calls named like prototype properties run, then reopen and continue, settles; their resource locks are their own', async () => {
    const b = backends[kind]();
    const started = deferred();
    const first = defineTool({
      name: 'charge',
      description: '',
      parameters: z.object({ key: z.string() }),
      resources: (a) => [a.key],
      execute: () => (started.resolve(), hang()),
    });
    const second = defineTool({
      name: 'charge',
      description: '',
      parameters: z.object({ key: z.string() }),
      resources: (a) => [a.key],
      execute: () => 'must not run again',
    });
    const rt1 = b.rt({
      model: scriptedModel([{ toolCalls: [{ id: '__proto__', name: 'charge', arguments: { key: 'constructor' } }] }]),
      tools: [first],
    });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'charge' });
    await started.promise;
    b.abandon(rt1);
    const rt2 = b.rt({ model: scriptedModel(['I could not confirm it.']), tools: [second] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.uncertainToolCalls).toMatchObject([{ callId: '__proto__', resolution: 'uncertain-hanging' }]);
    expect(s2.recovery.activeResourceLocks).toEqual(['constructor']);
    const r = await within(s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' }), SETTLE_MS, 'continue');
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'I could not confirm it.' });
    const log = await expectOneResultPerCall(rt2.store, 's');
    expect(log.find((e) => e.type === 'tool/result')!.payload).toMatchObject({
      callId: '__proto__',
      outcome: { kind: 'uncertain-hanging', resourceLocks: ['constructor'] },
    });
    expect(s2.activeResourceLocks).toEqual(['constructor']);
    await s2.releaseResources(['constructor']);
    expect(s2.activeResourceLocks).toEqual([]);
  });

  it('a crash with an unresolved call whose lock was released after its intent: continue does not lock it again', async () => {
    const b = backends[kind]();
    const started = deferred();
    const tool = (execute: () => Promise<string> | string) =>
      defineTool({ name: 'op', description: '', parameters: z.object({}), resources: ['toString', 'valueOf'], execute });
    const rt1 = b.rt({
      model: scriptedModel([{ toolCalls: [{ id: 'constructor', name: 'op', arguments: {} }] }]),
      tools: [tool(() => (started.resolve(), hang()))],
    });
    const s1 = await rt1.openSession('s');
    void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    await started.promise;
    b.abandon(rt1);
    const rt2 = b.rt({ model: scriptedModel([]), tools: [tool(() => 'never')] });
    const s2 = await rt2.openSession('s');
    await s2.releaseResources(['toString']);
    b.abandon(rt2);
    const rt3 = b.rt({ model: scriptedModel(['gave up']), tools: [tool(() => 'never')] });
    const s3 = await rt3.openSession('s');
    const r = await within(s3.execute({ kind: 'continue', runId: 'r', attemptId: 'a3' }), SETTLE_MS, 'continue');
    expect(r).toMatchObject({ status: 'succeeded' });
    const result = (await expectOneResultPerCall(rt3.store, 's')).find((e) => e.type === 'tool/result')!;
    expect(result.payload).toMatchObject({ callId: 'constructor', outcome: { kind: 'uncertain-hanging', resourceLocks: ['valueOf'] } });
    expect(s3.activeResourceLocks).toEqual(['valueOf']);
  });
});
