import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, scriptedModel } from '../../src/index.js';
import { ids, lmdbRuntime, logOf, memRuntime, typesOf } from '../helpers/runtime.js';
import { deliverFinal } from '../../src/actors/final-answer.js';
import { LogWriter } from '../../src/persistence/log-writer.js';
import { memoryStore } from '../../src/persistence/memory-store.js';
import { SessionProjection } from '../../src/persistence/projection.js';
import type { SessionServices } from '../../src/actors/session-services.js';

// Verification and delivery of the final answer: verifiers loop back to the model; final/message
// is committed before delivery.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const echo = defineTool({
  name: 'echo',
  description: '',
  mode: 'parallel',
  parameters: z.object({ t: z.string() }),
  execute: ({ t }) => t,
});

describe('verification and delivery (real LMDB)', () => {
  it('a verifier rejection is recorded, fed back, and counted as a recovery', async () => {
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([
        { toolCalls: [{ name: 'echo', arguments: { t: 'bad' } }] },
        { toolCalls: [{ name: 'echo', arguments: { t: 'good' } }] },
        'ok',
      ]),
      tools: [echo],
      verifier: (name, outcome) =>
        name === 'echo' && outcome.kind === 'completed' && outcome.content === 'bad' ? 'content must not be bad' : undefined,
    });
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'go' })).status).toBe('succeeded');
    const rej = (await logOf(store, 's')).filter((e) => e.type === 'verification/rejected');
    expect(rej).toHaveLength(1);
    expect(rej[0]!.payload).toMatchObject({ target: 'tool', reason: 'content must not be bad', message: { role: 'user' } });
  });

  it('finalVerifier rejections loop back to the model; past maxRecoveries the run ends budget_exhausted', async () => {
    const model = scriptedModel(['draft 1', 'draft 2', 'final']);
    const { runtime, store } = lmdbRuntime({ model, finalVerifier: (c) => (c.startsWith('draft') ? 'not final yet' : undefined) });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'final' });
    expect(model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'user', content: expect.stringContaining('not final yet') });
    expect((await logOf(store, 's')).filter((e) => e.type === 'verification/rejected')).toHaveLength(2);

    const { runtime: rt2 } = lmdbRuntime({
      model: scriptedModel(['draft'], { loop: true }),
      finalVerifier: () => 'never good',
      budget: { maxRecoveries: 2 },
    });
    const s2 = await rt2.openSession('s');
    expect(await s2.execute({ kind: 'prompt', ...ids(), message: 'go' })).toMatchObject({
      status: 'budget_exhausted',
      outcome: 'incomplete',
      budget: 'maxRecoveries',
    });
  });

  it('final/message is committed before delivery; the owner receives finalMessageId', async () => {
    let seenInLog: string[] = [];
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel(['answer']),
      delivery: {
        deliver: async (f) => {
          seenInLog = typesOf(await logOf(store, 's'));
          expect(f).toMatchObject({ sessionId: 's', content: 'answer', turn: 1, step: 1, finalMessageId: expect.any(String) });
        },
      },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(seenInLog).toContain('final/message');
    expect(seenInLog).not.toContain('delivery/committed');
    const log = await logOf(store, 's');
    const fm = log.find((e) => e.type === 'final/message')!;
    expect(log.find((e) => e.type === 'delivery/committed')!.payload.finalMessageId).toBe(fm.payload.finalMessageId);
    expect(r.finalMessageId).toBe(fm.payload.finalMessageId);
  });

  it('a throwing delivery owner → delivery/unknown, status delivery_unknown, error kind finalization', async () => {
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel(['answer']),
      delivery: {
        deliver: async () => {
          throw new Error('webhook down');
        },
      },
    });
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(r).toMatchObject({
      outcome: 'failed',
      status: 'delivery_unknown',
      error: { kind: 'finalization', message: expect.stringContaining('webhook down') },
    });
    const log = await logOf(store, 's');
    expect(typesOf(log).slice(-2)).toEqual(['delivery/unknown', 'run/end']);
  });

  // DESIGN §4 item 6: `delivery` is `{ deliver(final): Promise<void>, idempotent?: boolean }`. The
  // runtime keeps zod's parsed copy ({ deliver, idempotent }) and calls deliver on it, so a class
  // owner's `this` is the copy: every final ends delivery_unknown. (Left by the diff, not new.)
  it('a delivery owner that is a class instance gets its own `this` in deliver', async () => {
    class Outbox {
      readonly sent: string[] = [];
      idempotent = true;
      async deliver(f: { content: string }) {
        this.sent.push(f.content);
      }
    }
    const outbox = new Outbox();
    const { runtime: rt } = memRuntime({ model: scriptedModel(['the answer']), delivery: outbox });
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'q' });
    expect(r.status).toBe('succeeded');
    expect(outbox.sent).toEqual(['the answer']);
  });
});

describe('delivery after the session is lost', () => {
  it('a final is not delivered by a writer that no longer holds the session (fenced or its lease lost since final/message)', async () => {
    const delivered: unknown[] = [];
    const staged: string[] = [];
    const env = {
      sessionId: 's',
      delivery: { deliver: async (f: unknown) => void delivered.push(f) },
      writer: { mayStartEffect: () => false, stage: (type: string) => void staged.push(type) },
    } as unknown as SessionServices;
    const out = await deliverFinal(env, {
      runId: 'r',
      at: { turn: 1, step: 1, attempt: 1 },
      content: 'paid',
      finalMessageId: 's/r/final/1.1.1',
    });
    expect(delivered).toEqual([]);
    expect(out).toMatchObject({ kind: 'delivery_unknown' });
    expect(staged).toEqual([]); // nothing this writer could commit: the next writer settles the final
  });
});

describe('delivery after another writer attached', () => {
  it('a final is not delivered by a writer another attach has fenced (the epoch read again right before delivery)', async () => {
    const store = memoryStore();
    const first = await store.attachWriter('s');
    const writer = new LogWriter(store, 's', first.writerEpoch, first.lastSeq + 1, new SessionProjection());
    await store.attachWriter('s'); // another process opened the session
    const delivered: unknown[] = [];
    const env = {
      sessionId: 's',
      delivery: { deliver: async (f: unknown) => void delivered.push(f) },
      writer,
    } as unknown as SessionServices;
    const out = await deliverFinal(env, {
      runId: 'r',
      at: { turn: 1, step: 1, attempt: 1 },
      content: 'paid',
      finalMessageId: 's/r/final/1.1.1',
    });
    expect(delivered).toEqual([]);
    expect(out).toMatchObject({ kind: 'delivery_unknown' });
    await store.close();
  });
});
