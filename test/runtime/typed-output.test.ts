import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  isOutputValidationError,
  type OutputValidationError,
  isValidationError,
  lmdbStore,
  memoryStore,
  nodeListener,
  scriptedModel,
  sessionEvents,
  type DeliveryOwner,
  type EventRecord,
  type ModelProvider,
} from '../../src/index.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { sessionStream } from '../../src/web/client.js';
import { lmdbPath } from '../helpers/lmdb-path.js';
import { storeWithAppend } from '../helpers/runtime.js';

// An `output` zod schema: the final answer is JSON of it, validated, corrected through the model, stored parsed.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const Invoice = z.object({ number: z.string(), total: z.number(), lines: z.array(z.object({ item: z.string(), amount: z.number() })) });
const invoice = { number: 'INV-7', total: 12.5, lines: [{ item: 'tea', amount: 12.5 }] };

async function logOf(store: { readEvents(id: string): AsyncIterable<EventRecord> }, id: string): Promise<EventRecord[]> {
  const out: EventRecord[] = [];
  for await (const e of store.readEvents(id)) out.push(e);
  return out;
}

describe('typed output', () => {
  it('a run with an output schema returns the answer parsed as result.output, typed by the schema, and stores it in final/message', async () => {
    const store = memoryStore();
    const model = scriptedModel([JSON.stringify(invoice)]);
    const runtime = createRuntime({ store, model });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r = await s.run('extract', { output: Invoice }).result;
    expectTypeOf(r.output).toEqualTypeOf<z.infer<typeof Invoice> | undefined>();
    // @ts-expect-error: not a field of Invoice
    void r.output?.customer;
    expect(r.status).toBe('succeeded');
    expect(r.output).toEqual(invoice);
    expect(r.finalMessage).toBe(JSON.stringify(invoice));
    const log = await logOf(store, 's');
    const final = log.find((e) => e.type === 'final/message')!;
    expect(final.payload.output).toEqual(invoice);
    expect(final.payload.content).toBe(JSON.stringify(invoice));
    // a provider without a native mode is asked for JSON of the schema in the system message
    const system = model.requests[0]!.messages[0]!;
    expect(system.role).toBe('system');
    expect(system.content).toContain('"total"');
    expect(model.requests[0]!.output).toMatchObject({ name: 'final_answer', strict: true });
    // run/start records the schema as JSON Schema with its digest
    const start = log.find((e) => e.type === 'run/start')!;
    expect((start.payload.output as { jsonSchema: { required: string[] } }).jsonSchema.required).toEqual(['number', 'total', 'lines']);
    expect((start.payload.output as { digest: string }).digest).toMatch(/^[0-9a-f]{64}$/);
  });

  it("execute takes output in its request; the runtime's output is the default of every run and types its sessions", async () => {
    const runtime = createRuntime({ store: memoryStore(), model: scriptedModel([JSON.stringify(invoice), '{"n": 3}']), output: Invoice });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const first = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'x' });
    expectTypeOf(first.output).toEqualTypeOf<z.infer<typeof Invoice> | undefined>();
    expect(first.output).toEqual(invoice);
    const N = z.object({ n: z.number() });
    const second = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'y', output: N });
    expectTypeOf(second.output).toEqualTypeOf<{ n: number } | undefined>();
    expect(second.output).toEqual({ n: 3 });
  });

  it("a follow-up input runs with the runtime's output schema: its result carries the parsed object", async () => {
    const runtime = createRuntime({ store: memoryStore(), model: scriptedModel([JSON.stringify(invoice)]), output: Invoice });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    await s.submitInput({ inputId: 'f1', mode: 'follow_up', message: 'extract' });
    const r = await runtime.waitForResult('s', 'f1');
    expect(r.status).toBe('succeeded');
    expect(r.output).toEqual(invoice);
  });

  it('an answer that is not JSON of the schema is fed back with the zod issues, counted as a protocol correction, then accepted', async () => {
    const store = memoryStore();
    const model = scriptedModel([
      'Here is your invoice!',
      JSON.stringify({ ...invoice, total: 'twelve' }),
      '```json\n' + JSON.stringify(invoice) + '\n```',
    ]);
    const runtime = createRuntime({ store, model, config: { maxProtocolCorrections: 2 } });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r = await s.run('extract', { output: Invoice }).result;
    expect(r.status).toBe('succeeded');
    expect(r.output).toEqual(invoice);
    expect(r.recoveries).toBe(0); // corrections, not recoveries
    const rejected = (await logOf(store, 's')).filter((e) => e.type === 'verification/rejected');
    expect(rejected.map((e) => e.payload.target)).toEqual(['output', 'output']);
    expect((rejected[0]!.payload.issues as string[])[0]).toContain('not JSON');
    expect((rejected[1]!.payload.issues as string[])[0]).toMatch(/^total: /);
    // the model read the issues before its next answer
    const third = model.requests[2]!.messages;
    expect(third.at(-1)).toMatchObject({ role: 'user' });
    expect(String(third.at(-1)!.content)).toContain('total: ');
  });

  it('exhausted corrections end the run failed with an OutputValidationError naming the last issues', async () => {
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel(['no', '{"number": 1}', '{"number": "1"}']),
      config: { maxProtocolCorrections: 2 },
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const r = await s.run('extract', { output: Invoice }).result;
    expect(r.status).toBe('failed');
    expect(r.output).toBeUndefined();
    const cause = r.error!.cause;
    expect(isOutputValidationError(cause)).toBe(true);
    if (!isOutputValidationError(cause)) return;
    expect(cause.issues.some((i) => i.startsWith('total: '))).toBe(true);
    expect(cause.issues.some((i) => i.startsWith('number: '))).toBe(false);
    expect(r.error!.message).toContain('total: ');
  });

  it('a failed typed run read back from the log (its ids again, another runtime) still satisfies isOutputValidationError, issues included', async () => {
    const dir = lmdbPath(cleanups);
    const first = dir.rt({ model: scriptedModel(['no', '{"number": 1}', '{"number": "1"}']), config: { maxProtocolCorrections: 2 } });
    const s1 = await first.openSession('s');
    const live = await s1.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'extract', output: Invoice });
    const again = await s1.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'extract', output: Invoice });
    await first.close();
    const s2 = await dir.rt({ model: scriptedModel([]) }).openSession('s');
    const elsewhere = await s2.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'extract', output: Invoice });
    const issues = (live.error!.cause as OutputValidationError).issues;
    expect(issues.some((i) => i.startsWith('total: '))).toBe(true);
    for (const r of [again, elsewhere]) {
      expect(r.status).toBe('failed');
      const cause = r.error!.cause;
      expect(cause).not.toBeInstanceOf(Error); // its recorded name and fields
      expect(isOutputValidationError(cause)).toBe(true);
      expect(cause).toMatchObject({ name: 'OutputValidationError', corrections: 2, issues });
    }
  });

  it('the delivery owner receives the parsed output beside the content', async () => {
    const delivered: unknown[] = [];
    const delivery: DeliveryOwner = { deliver: async (f) => void delivered.push(f.output) };
    const runtime = createRuntime({ store: memoryStore(), model: scriptedModel([JSON.stringify(invoice)]), delivery });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    await s.run('x', { output: Invoice }).result;
    expect(delivered).toEqual([invoice]);
  });

  it('subscribers get the output in execution_finished, and web clients in the committed final/message and run/end records', async () => {
    const store = memoryStore();
    const runtime = createRuntime({ store, model: scriptedModel([JSON.stringify(invoice)]) });
    cleanups.push(() => runtime.close());
    const server = createServer(nodeListener((req) => sessionEvents(store, 's', req, { pollMs: 20 })));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
    const s = await runtime.openSession('s');
    const run = s.run('x', { output: Invoice });
    const finished: unknown[] = [];
    for await (const env of run.events) if (env.event.type === 'execution_finished') finished.push(env.event.result.output);
    expect(finished).toEqual([invoice]);
    const abort = new AbortController();
    const records = new Map<string, Record<string, unknown>>();
    for await (const item of sessionStream({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/s`, signal: abort.signal })) {
      if (item.kind === 'committed') records.set(item.record.type, item.record.payload);
      if (records.has('run/end')) break;
    }
    abort.abort();
    expect(records.get('final/message')!.output).toEqual(invoice);
    expect((records.get('run/end')!.result as { output: unknown }).output).toEqual(invoice);
  });

  it('the output schema is part of the execution-profile fingerprint', async () => {
    const store = memoryStore();
    const model = scriptedModel(['plain', JSON.stringify(invoice)]);
    const runtime = createRuntime({ store, model });
    cleanups.push(() => runtime.close());
    const typed = createRuntime({ store: memoryStore(), model, output: Invoice });
    cleanups.push(() => typed.close());
    expect(typed.executionProfileFingerprint).not.toBe(runtime.executionProfileFingerprint);
    const s = await runtime.openSession('s');
    await s.run('a').result;
    await s.run('b', { output: Invoice }).result;
    const fps = (await logOf(store, 's')).filter((e) => e.type === 'run/start').map((e) => e.payload.executionProfileFingerprint);
    expect(fps[0]).toBe(runtime.executionProfileFingerprint);
    expect(fps[1]).not.toBe(fps[0]);
  });

  it("a stop's receipt names the running attempt's execution profile, its output schema included", async () => {
    let release = () => {};
    const gate = new Promise<void>((r) => (release = r));
    let started = () => {};
    const running = new Promise<void>((r) => (started = r));
    const slow = defineTool({
      name: 'slow',
      description: '',
      parameters: z.object({}),
      execute: async () => (started(), await gate, 'done'),
    });
    const store = memoryStore();
    const runtime = createRuntime({ store, model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }]), tools: [slow] });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const run = s.run({ kind: 'prompt', runId: 'r', message: 'go' }, { output: Invoice });
    await running;
    const receipt = await s.stopAfterCurrentToolRound({
      sessionId: 's',
      sessionInstanceId: s.sessionInstanceId,
      interactionId: 'r',
      expectedRunEpoch: 1,
      idempotencyKey: 'k',
    });
    release();
    expect((await run.result).status).toBe('stopped');
    const start = (await logOf(store, 's')).find((e) => e.type === 'run/start')!;
    expect(receipt.executionProfileFingerprint).toBe(start.payload.executionProfileFingerprint);
    expect(receipt.executionProfileFingerprint).not.toBe(runtime.executionProfileFingerprint);
  });

  it('an output that is not a zod schema is refused with a ValidationError', async () => {
    const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['{}']) });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect(() => s.run('x', { output: { type: 'object' } as never })).toThrow(expect.objectContaining({ name: 'ValidationError' }));
    await expect(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'x', output: 5 as never })).rejects.toSatisfy(
      isValidationError,
    );
    expect(() => createRuntime({ store: memoryStore(), model: scriptedModel([]), output: 'json' as never })).toThrow(
      expect.objectContaining({ name: 'ValidationError' }),
    );
  });

  it('partialOutputStream yields the partial objects as the answer streams', async () => {
    const chunks = ['{"number":"IN', 'V-7","to', 'tal":12.5,"lines":[{"item":"te', 'a","amount":12.5}]}'];
    const model: ModelProvider = {
      modelId: 'chunked',
      async call(_req, onEvent) {
        for (const c of chunks) {
          onEvent({ type: 'text_delta', text: c });
          await new Promise((r) => setImmediate(r)); // the reader takes each partial before the next delta
        }
        return { message: { role: 'assistant', content: chunks.join('') }, finishReason: 'stop' };
      },
    };
    const runtime = createRuntime({ store: memoryStore(), model });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const run = s.run('x', { output: Invoice });
    const seen: unknown[] = [];
    for await (const p of run.partialOutputStream) {
      expectTypeOf(p).toMatchTypeOf<{ number?: string; total?: number } | undefined>();
      seen.push(p);
    }
    expect(seen).toEqual([{ number: 'IN' }, { number: 'INV-7' }, { number: 'INV-7', total: 12.5, lines: [{ item: 'te' }] }, invoice]);
    // a reader that falls behind gets the newest partial, not a backlog
    await s.waitForIdle();
    const slow = s.run('z', { output: Invoice });
    await slow.result;
    const late: unknown[] = [];
    for await (const p of slow.partialOutputStream) late.push(p);
    expect(late).toEqual([invoice]);
    expect((await run.result).output).toEqual(invoice);
    // a run without a schema yields none
    await s.waitForIdle();
    const plain = s.run('y');
    const none: unknown[] = [];
    for await (const p of plain.partialOutputStream) none.push(p);
    expect(none).toEqual([]);
  });

  it('partialOutputStream yields the whole object once where the provider does not stream', async () => {
    const runtime = createRuntime({
      store: memoryStore(),
      model: {
        modelId: 'whole',
        call: async () => ({ message: { role: 'assistant', content: JSON.stringify(invoice) }, finishReason: 'stop' }),
      },
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    const run = s.run('x', { output: Invoice });
    const seen: unknown[] = [];
    for await (const p of run.partialOutputStream) seen.push(p);
    expect(seen).toEqual([invoice]);
    expect((await run.result).output).toEqual(invoice);
  });

  it('a continue in another runtime validates against the schema recorded in run/start', async () => {
    const dir = lmdbPath(cleanups);
    // the first process dies before the model's answer is written: the run stays open
    const store = dyingStore(dir.path, 'assistant/message', 'before');
    const s1 = await createRuntime({ store, model: scriptedModel(['never logged']) }).openSession('s');
    void s1.run('x', { output: Invoice }).result;
    await store.dies;
    // no zod schema in this process: the recorded JSON Schema checks the answer
    const model = scriptedModel(['{"number": "A"}', JSON.stringify(invoice)]);
    const second = dir.rt({ model });
    const s2 = await second.openSession('s');
    const r2 = await s2.execute({ kind: 'continue' });
    expect(r2.status).toBe('succeeded');
    expect(r2.output).toEqual(invoice);
    const log = await logOf(second.store, 's');
    expect(log.filter((e) => e.type === 'verification/rejected').map((e) => e.payload.target)).toEqual(['output']);
    expect(String(model.requests[0]!.messages[0]!.content)).toContain('"lines"');
    const starts = log.filter((e) => e.type === 'run/start');
    expect(starts).toHaveLength(2);
    expect(starts[1]!.payload.executionProfileFingerprint).toBe(starts[0]!.payload.executionProfileFingerprint);
  });

  it("a continue in another runtime whose recorded schema zod cannot compile back is refused until it is given the run's own schema", async () => {
    const dir = lmdbPath(cleanups);
    // JSON Schema keys zod cannot read back travel in the schema's metadata
    const Closed = z.object({ n: z.number() }).meta({ unevaluatedProperties: false });
    const store = dyingStore(dir.path, 'assistant/message', 'before');
    const s1 = await createRuntime({ store, model: scriptedModel(['never logged']) }).openSession('s');
    void s1.run('x', { output: Closed }).result;
    await store.dies;
    const s2 = await dir.rt({ model: scriptedModel(['{"n": 1}']) }).openSession('s');
    const refused = await s2.execute({ kind: 'continue' }).catch((e: unknown) => e);
    expect(refused).toSatisfy(isValidationError);
    expect(String(refused)).toMatch(/cannot be compiled back/);
    const r = await s2.execute({ kind: 'continue', output: Closed });
    expect([r.status, r.output]).toEqual(['succeeded', { n: 1 }]);
  });

  it('a continue that gives another schema than its run recorded is refused', async () => {
    const dir = lmdbPath(cleanups);
    const store = dyingStore(dir.path, 'assistant/message', 'before');
    const s1 = await createRuntime({ store, model: scriptedModel(['never logged']) }).openSession('s');
    void s1.run('x', { output: Invoice }).result;
    await store.dies;
    const s2 = await dir.rt({ model: scriptedModel([]) }).openSession('s');
    await expect(s2.execute({ kind: 'continue', output: z.object({ x: z.string() }) })).rejects.toSatisfy(isValidationError);
  });

  it('after a crash between final/message and its delivery, the reopened run returns the stored object without a model call', async () => {
    const dir = lmdbPath(cleanups);
    const store = dyingStore(dir.path, 'final/message', 'after');
    const s1 = await createRuntime({ store, model: scriptedModel([JSON.stringify(invoice)]) }).openSession('s');
    const run = s1.run('x', { output: Invoice });
    await store.dies;
    const delivered: unknown[] = [];
    const model = scriptedModel([]);
    const second = dir.rt({ model, delivery: { idempotent: true, deliver: async (f) => void delivered.push(f.output) } });
    await second.openSession('s');
    const r = await second.waitForResult('s', run.runId);
    expect(r.status).toBe('succeeded');
    expect(r.output).toEqual(invoice);
    expect(delivered).toEqual([invoice]);
    expect(model.requests).toHaveLength(0);
  });
});

/** An LMDB store that hangs forever ("dies") at the first append holding a `type` record, before or after writing it. */
function dyingStore(path: string, type: string, point: 'before' | 'after') {
  const inner = lmdbStore({ path });
  let dead = false;
  let died = () => {};
  const dies = new Promise<void>((r) => (died = r));
  const store = storeWithAppend(inner, async (id, epoch, seq, drafts) => {
    if (dead) return new Promise<never>(() => {});
    if ((drafts as EventDraft[]).some((d) => d.type === type)) {
      dead = true;
      if (point === 'after') await inner.append(id, epoch, seq, drafts);
      died();
      return new Promise<never>(() => {});
    }
    return inner.append(id, epoch, seq, drafts);
  });
  return Object.assign(store, { dies });
}
