import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import OpenAI from 'openai';
import { createRuntime, defineTool, lmdbStore, memoryStore, openaiModel, scriptedModel, type Envelope, type EventStore, type RuntimeOptions } from '../../src/index.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { logOf, sleep, storeWithAppend } from '../helpers/runtime.js';
import { oa, startOpenAIServer } from '../providers/openai-server.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';

/**
 * Review of 4b6952d..HEAD (src): boundary validation, session lifecycle, concluded answers,
 * recovery resolutions, compaction through callWithRetries, envelopes with logSeq, the
 * ModelResponseSchema check. Each test is a defect found; it fails until fixed.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const lmdbPath = () => lmdbPathFor(cleanups);

function memRt(options: Omit<RuntimeOptions, 'store'>, store: EventStore = memoryStore()) {
  const r = createRuntime({ ...options, store });
  cleanups.push(() => r.close().catch(() => undefined));
  return r;
}

describe('session diff review', () => {
  // docs/architecture.md: "An envelope that announces a log event goes out once that event is committed,
  // with its logSeq: ... tool_start with its tool/call's seq". env.callSeqs is only filled by commits of
  // this process, so a call whose tool/call was committed before a restart starts without a logSeq.
  it('tool_start of a parallel call re-run by continue in a new process carries its tool/call logSeq', async () => {
    const db = lmdbPath();
    let release!: () => void;
    const hang = new Promise<void>((r) => (release = r));
    const look = defineTool({ name: 'look', description: 'read only', mode: 'parallel', parameters: z.object({}), execute: async () => { await hang; return 'seen'; } });
    const rt1 = db.rt({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'look', arguments: {} }] }]), tools: [look] });
    const s1 = await rt1.openSession('s');
    const p = s1.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    for (let i = 0; i < 100 && !(await logOf(rt1.store, 's')).some((e) => e.type === 'tool/call'); i++) await sleep(10);
    await rt1.close();
    release();
    expect((await p).status).toBe('detached');
    const look2 = defineTool({ name: 'look', description: 'read only', mode: 'parallel', parameters: z.object({}), execute: () => 'seen' });
    const rt2 = db.rt({ model: scriptedModel(['done']), tools: [look2] });
    const s2 = await rt2.openSession('s');
    expect(s2.recovery.uncertainToolCalls.map((c) => c.resolution)).toEqual(['rerun']);
    const seen: Envelope[] = [];
    s2.subscribe((e) => void seen.push(e), { required: true });
    expect((await s2.execute({ kind: 'continue', runId: 'r1', attemptId: 'a2' })).status).toBe('succeeded');
    const callSeq = (await logOf(rt2.store, 's')).find((e) => e.type === 'tool/call')!.seq;
    const start = seen.find((e) => e.event.type === 'tool_start');
    expect(start?.logSeq).toBe(callSeq);
  });

  // DESIGN §6: `message: string | Message | Message[]`; guarantees.md: "each must have role user (no tool
  // calls, no tool result)". UserMessage is a z.strictObject of role/content/name/providerData, so a
  // Message whose optional keys are present but undefined is refused as "Unrecognized keys".
  it('a prompt message typed as Message with its optional keys left undefined (toolCalls, toolCallId, isError) is accepted', async () => {
    const rt = memRt({ model: scriptedModel(['ok']) });
    const s = await rt.openSession('s');
    // a Message built generically: `toolCalls: calls.length ? calls : undefined` — a user message with no tool calls
    const message = { role: 'user' as const, content: 'hi', toolCalls: undefined, toolCallId: undefined, isError: undefined };
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message });
    expect(r.status).toBe('succeeded');
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
    const rt = memRt({ model: scriptedModel(['the answer']), delivery: outbox });
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'q' });
    expect(r.status).toBe('succeeded');
    expect(outbox.sent).toEqual(['the answer']);
  });

  // guarantees.md requestCancel: "resolves false when nothing runs, or the attempt ended first". In
  // onRunFinished `current` is cleared while `busy` stays true (loadOpenRun), and the new
  // `!target && busy` branch answers true though nothing will be cancelled.
  it('requestCancel called after the attempt ended (its result being settled) resolves false', async () => {
    const store0 = memoryStore();
    let slowHead = false;
    const store: EventStore = { ...storeWithAppend(store0, (...a) => store0.append(...a)), getHead: async (id) => { if (slowHead) await sleep(300); return store0.getHead(id); } };
    const deploy = defineTool({ name: 'deploy', description: 'd', parameters: z.object({}), needsApproval: true, execute: () => 'deployed' });
    const rt = memRt({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'deploy', arguments: {} }] }, 'done']), tools: [deploy] }, store);
    const s = await rt.openSession('s');
    const seen: string[] = [];
    s.subscribe((e) => void seen.push(e.event.type));
    slowHead = true;
    const p = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    for (let i = 0; i < 200 && !(await logOf(store0, 's')).some((e) => e.type === 'run/end'); i++) await sleep(5);
    await sleep(50); // the run has ended (run/end committed); the session is reading the open run back
    const cancelled = await s.requestCancel();
    const r = await p;
    slowHead = false;
    expect(r.status).toBe('suspended');
    expect((await logOf(store0, 's')).some((e) => e.type === 'cancellation/requested')).toBe(false);
    expect(cancelled).toBe(false);
  });

  // f9e40b0: "its usage counts in the step (result, cost, budgets, reopen)"; the fold counts the
  // compaction's usage, but the live run adds it only when the step's model call succeeds.
  it("a compaction's summary usage is in the result of a run whose step then fails", async () => {
    const big = (c: string) => c.repeat(2000);
    const model = scriptedModel([
      big('a'),
      big('b'),
      { text: 'SUMMARY', usage: { inputTokens: 700, outputTokens: 30 } },
      { error: { message: 'bad request', retryable: false, code: 'bad_request' } },
    ]);
    const store = memoryStore();
    const rt = memRt({ model, config: { contextWindow: 1500, outputReserve: 200, retryBackoffMs: 1 } }, store);
    const s = await rt.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a0', message: big('x') })).status).toBe('succeeded');
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'short' })).status).toBe('succeeded');
    const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a2', message: 'third' });
    expect(r.status).toBe('failed');
    const log = await logOf(store, 's');
    const comp = log.find((e) => e.type === 'compaction');
    expect(comp?.payload.usage).toEqual({ inputTokens: 700, outputTokens: 30 });
    expect(r.usage.outputTokens).toBeGreaterThanOrEqual(30);
    expect(r.usage.inputTokens).toBeGreaterThanOrEqual(700);
  });

  // guarantees.md: the response check must fail only a *bad* response. The openai adapter maps
  // cached_tokens: null to cachedInputTokens: null, which ModelResponseSchema (Usage) refuses: the run
  // fails with a non-retryable invalid_response on an ordinary answer.
  it('an OpenAI-compatible stream whose usage chunk has cached_tokens: null (LiteLLM-style) is a valid response, not invalid_response', async () => {
    const server = await startOpenAIServer();
    cleanups.push(async () => server.close());
    const nullCached = { ...oa.usage(20, 4), usage: { prompt_tokens: 20, completion_tokens: 4, total_tokens: 24, prompt_tokens_details: { cached_tokens: null, audio_tokens: null }, completion_tokens_details: null } };
    server.reply(oa.stream([oa.role(), oa.text('Hello'), oa.finish('stop'), nullCached]));
    const model = openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: server.baseURL }), model: 'gpt-test' });
    const rt = memRt({ model });
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
    expect(r.error?.message).toBeUndefined();
    expect(r.status).toBe('succeeded');
    expect(r.finalMessage).toBe('Hello');
  });

  // guarantees.md: runId and attemptId "with the session id and run-end: take at most 1,900 bytes in
  // UTF-8, checked before the attempt starts". assertRunIdsFit measures run-end:<r>:<a>, but a respond or
  // continue writes run-start:<r>:<a>, 2 bytes longer: its run/start commit fails, and the suspended
  // run is settled failed (its approval lost) instead of the pair being refused up front.
  it('a respond whose runId/attemptId fit the documented limit (with run-end:) is not failed by its longer run-start: id', async () => {
    const db = lmdbPath();
    const deploy = defineTool({ name: 'deploy', description: 'd', parameters: z.object({}), needsApproval: true, execute: () => 'deployed' });
    const rt = db.rt({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'deploy', arguments: {} }] }, 'done']), tools: [deploy] });
    const s = await rt.openSession('s');
    const runId = 'r'.repeat(1000);
    const first = await s.execute({ kind: 'prompt', runId, attemptId: 'a1', message: 'go' });
    expect(first.status).toBe('suspended');
    // guarantees.md: runId and attemptId "with the session id and run-end: take at most 1,900 bytes" — exactly 1,900 here
    const attemptId = 'b'.repeat(1900 - 's'.length - 'run-end:'.length - runId.length - 1);
    expect(Buffer.byteLength(`srun-end:${runId}:${attemptId}`)).toBe(1900);
    let r: Awaited<ReturnType<typeof s.execute>> | undefined;
    let thrown: unknown;
    try {
      r = await s.execute({ kind: 'respond', runId, attemptId, questionId: first.pendingRequest!.questionId, answer: { decisions: { c1: 'approve' } } });
    } catch (e) {
      thrown = e;
    }
    const log = await logOf(rt.store, 's');
    // either accepted and run (the pair fits), or refused before anything is written — never a run settled `failed` by its own run/start
    // observed: run/end statuses ['suspended', 'failed'] — the suspended run is settled failed by
    // "invalid input to append: drafts[0].eventId (eventId and sessionId together take 1902 bytes ...)"
    if (thrown === undefined) {
      expect(r!.error?.message).toBeUndefined();
      expect(r!.status).toBe('succeeded');
    }
    expect(log.filter((e) => e.type === 'run/end').map((e) => e.payload.status)).not.toContain('failed');
  });

  // The new continue-settles-an-undelivered-final branch catches the closed writer's error and
  // returns `failed` ("continue it again") instead of checking `this.closed` as the outer catch does.
  it('session.close() while a continue is settling an undelivered final answers that execute detached, not failed', async () => {
    const db = lmdbPath();
    let failRunEnd = true;
    const inner = lmdbStore({ path: db.path });
    const store = storeWithAppend(inner, async (id, epoch, seq, drafts) => {
      if (failRunEnd && (drafts as EventDraft[]).some((d) => d.type === 'run/end')) {
        failRunEnd = false;
        throw new Error('disk hiccup');
      }
      return inner.append(id, epoch, seq, drafts);
    });
    let slow = false;
    let entered!: () => void;
    const inDeliver = new Promise<void>((r) => (entered = r));
    const rt = db.rt(
      {
        model: scriptedModel(['the answer']),
        delivery: {
          idempotent: true,
          deliver: async () => {
            if (!slow) return;
            entered();
            await sleep(200);
          },
        },
      },
      store,
    );
    const s = await rt.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r1.checkpointCommitted).toBe(false);
    slow = true;
    const p = s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' });
    await inDeliver;
    await s.close();
    const r2 = await p;
    // guarantees.md close(): "its pending execute resolves with a detached result saying so (also one
    // still reading the log before its attempt started)"
    expect(r2.status).toBe('detached');
  });
});
