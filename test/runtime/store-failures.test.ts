import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  defineTool,
  lmdbStore,
  memoryStore,
  scriptedModel,
  type EventStore,
  type ExecutionResult,
} from '../../src/index.js';
import { isStoreUnavailableError, StoreUnavailableError } from '../../src/contracts/errors.js';
import { unreadLogResult } from '../../src/runtime/log-lookups.js';
import { flakyStore, type Flaky } from '../helpers/flaky-store.js';
import { hookedStore, lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { ids, logOf, memRuntime, SETTLED } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';
import { unansweredInLog, unansweredInRequest } from '../helpers/unanswered.js';

// A transient store failure (an append or a read that fails once) never rejects an execute,
// never leaves a tool call unanswered and never settles an open run behind the caller's back.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

/** A memoryStore whose getHead fails once, right after the step's intent (tool/call) is committed. */
function storeFailingFenceCheck(): { store: EventStore; inner: EventStore } {
  const inner = memoryStore();
  let armed = false;
  const store: EventStore = {
    attachWriter: (id) => inner.attachWriter(id),
    append: async (id, epoch, seq, drafts) => {
      const r = await inner.append(id, epoch, seq, drafts);
      if (drafts.some((d) => d.type === 'tool/call')) armed = true;
      return r;
    },
    readEvents: (id, r) => inner.readEvents(id, r),
    loadSurface: (id) => inner.loadSurface(id),
    getHead: async (id) => {
      if (armed) {
        armed = false;
        throw new Error('transient read error');
      }
      return inner.getHead(id);
    },
    getEventById: (id, e) => inner.getEventById(id, e),
    listSessions: () => inner.listSessions(),
    events$: (id, o) => inner.events$(id, o),
    close: () => inner.close(),
  };
  return { store, inner };
}

describe('transient read failures', () => {
  // Guards against (seen in scenarios-steering.test.ts, seeds 2 and 19): `execute` (a respond) rejects
  // with the store's error instead of resolving with a result. DESIGN §6: "`execute` rejects only
  // for bad input (`ValidationError`) or a busy session (`ExecutionBusy`). Everything that happens
  // while running comes back as a result"; guarantees.md: "`session.execute(request)` rejects only
  // for bad input or a busy session; every run failure is a result".
  it("an attempt that did not start because the log could not be read fails with the read's typed error as its cause", () => {
    const read = new StoreUnavailableError('PostgreSQL getEventById failed: terminating connection', 'none');
    const result = unreadLogResult({ runId: 'r1', attemptId: 'a1' }, read);
    expect(result).toMatchObject({ status: 'failed', checkpointCommitted: false, error: { kind: 'execution' } });
    expect(isStoreUnavailableError(result.error?.cause)).toBe(true);
  });

  it('execute resolves with a result when a store read fails once', async () => {
    const dir = tempDir();
    const f: Flaky = { failAppendIn: 0, failReadIn: 0, appendFailures: 0, readFailures: 0 };
    const model = scriptedModel(['hello']);
    const rt = createRuntime({ store: flakyStore(lmdbStore({ path: dir.path }), f), model });
    const s = await rt.openSession('s');
    f.failReadIn = 1; // the next getHead/getEventById fails once
    const got = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' }).then(
      (res) => ({ resolved: true, isResult: typeof res.status === 'string' }),
      (e: Error) => ({ rejected: `${e.name}: ${e.message}` }),
    );
    await rt.close();
    await dir.cleanup();
    expect(f.readFailures).toBe(1);
    expect(got).toEqual({ resolved: true, isResult: true });
  });

  // guarantees.md: "so no tool call is ever left unanswered on the surface"; "Failed commits within a
  // process ... a tool that ran is never left without its result on a settled run". An exclusive call's
  // fence check (a store read) that fails transiently makes the call actor fail: the run is settled
  // (`run/end failed`) with the call's tool/call and no tool/result, and every later prompt of the
  // session sends the model an assistant tool call with no answer (providers refuse that request).
  it("a transient store error in an exclusive call's fence check leaves no call unanswered on a settled run", async () => {
    const { store, inner } = storeFailingFenceCheck();
    let ran = 0;
    const exc = defineTool({ name: 'exc', description: '', parameters: z.object({}), execute: () => (ran++, 'done') });
    const model = scriptedModel([{ toolCalls: [{ name: 'exc', arguments: {} }] }, 'done', 'second answer']);
    const { runtime } = memRuntime({ model, tools: [exc] }, store);
    const s = await runtime.openSession('s');
    const r = await s.execute({ kind: 'prompt', ...ids(), message: 'go' });
    expect(ran).toBe(0);
    const log = await logOf(inner, 's');
    expect(log.at(-1)?.type).toBe('run/end');
    // the call never started: it must still be answered (e.g. skipped) before the run settles
    expect(unansweredInLog(log)).toEqual([]);
    await s.execute({ kind: 'prompt', ...ids(), message: 'next' });
    expect(unansweredInRequest(model.requests.at(-1)!.messages)).toEqual([]);
    // the call is answered `skipped` (it never started) and the model goes on from there
    expect(log.find((e) => e.type === 'tool/result')?.payload.outcome).toMatchObject({ kind: 'skipped' });
    expect(r.status).toBe('succeeded');
  });
});

describe('failed commits', () => {
  // Guards against (seen in scenarios-steering.test.ts, seed 59):
  // a `respond` to a suspended approval whose first commit fails once (a transient append error)
  // ends the run `failed` with a settled run/end, but the suspended batch's tool calls never get
  // results: the next run's model request holds the assistant tool call with no tool result.
  // guarantees.md: "so no tool call is ever left unanswered on the surface"; "Failed commits within
  // a process: A commit that fails (a transient store error) ... is treated like the matching crash
  // point" (a crash during a respond leaves the run open: "`continue` goes on; every call of the
  // assistant message has a result").
  it('a respond whose first commit fails leaves no tool call unanswered on the next model request', async () => {
    const dir = tempDir();
    const wire = defineTool({ name: 'wire', description: '', needsApproval: true, parameters: z.object({}), execute: async () => 'wired' });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'wire', arguments: {} }] }, 'second run answer', 'x', 'y']);
    const f: Flaky = { failAppendIn: 0, failReadIn: 0, appendFailures: 0, readFailures: 0 };
    const rt = createRuntime({ store: flakyStore(lmdbStore({ path: dir.path }), f), model, tools: [wire] });
    const s = await rt.openSession('s');
    const first = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'pay' });
    f.failAppendIn = 1; // the respond's first commit fails once
    const res = await s.execute({
      kind: 'respond',
      runId: 'r1',
      attemptId: 'a2',
      questionId: first.pendingRequest!.questionId,
      answer: { decisions: { c1: 'approve' } },
    });
    let second: ExecutionResult | undefined;
    second = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a3', message: 'next' }).catch(() => undefined);
    const log = await logOf(rt.store, 's');
    await rt.close();
    await dir.cleanup();
    expect(first.status).toBe('suspended');
    expect(f.appendFailures).toBe(1);
    const unanswered = model.requests.flatMap((q, i) =>
      q.messages.flatMap((m, j) =>
        (m.toolCalls ?? [])
          .filter((c) => !q.messages.slice(j + 1).some((x) => x.role === 'tool' && x.toolCallId === c.id))
          .map((c) => `request ${i}: ${c.id}`),
      ),
    );
    const c1Results = log.filter((e) => e.type === 'tool/result' && e.payload.callId === 'c1').length;
    const r1Settled = log.some((e) => e.type === 'run/end' && e.payload.runId === 'r1' && SETTLED.has(String(e.payload.status)));
    // either r1 stays open (second prompt refused) or, if it settled, c1 has its result
    expect({ respond: res.status, unanswered, settledWithoutResult: r1Settled && c1Results === 0, second: second?.status }).toMatchObject({
      unanswered: [],
      settledWithoutResult: false,
    });
  });

  // DESIGN §5: "final/message without delivery event: redelivered when the delivery owner declares
  // itself idempotent ..., else delivery/unknown"; promise: "no final answer silently ... delivered
  // twice". The run/end commit fails once (a transient store error) after the final was delivered;
  // the session keeps the run open in memory and an in-process `continue` calls the model again and
  // delivers a second, different final answer for the same run (openSession would have settled it).
  it('after a failed run/end commit, an in-process continue does not deliver a second final answer to a non-idempotent owner', async () => {
    const db = lmdbPath();
    let failed = false;
    const store = hookedStore(lmdbStore({ path: db.path }), (drafts) => {
      if (!failed && drafts.some((d) => d.type === 'run/end')) {
        failed = true;
        throw new Error('disk hiccup');
      }
    });
    const delivered: string[] = [];
    const rt = db.rt(
      { model: scriptedModel(['answer one', 'answer two']), delivery: { deliver: async (f) => void delivered.push(f.content) } },
      store,
    );
    const s = await rt.openSession('s');
    const r1 = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(r1).toMatchObject({ checkpointCommitted: false });
    expect(delivered).toEqual(['answer one']);
    await s.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' }).catch((e: unknown) => e);
    expect(delivered).toEqual(['answer one']);
    const log = await logOf(rt.store, 's');
    expect(log.filter((e) => e.type === 'final/message')).toHaveLength(1);
  });

  // Promise: "no side-effecting tool silently run twice ... every uncertainty reported by name";
  // guarantees.md: "no tool call is ever left unanswered on the surface". The results commit fails
  // once (transient store error) after an exclusive tool ran: the run then commits run/end `failed`
  // with historyConsistent: true — the call has no tool/result, is not reported uncertain after a
  // restart, holds no lock, and stays unanswered on the surface the next run sends to the model.
  it('a results commit that fails once after an exclusive tool ran leaves the call answered or reported, never silently dropped', async () => {
    const db = lmdbPath();
    let failed = false;
    const store = hookedStore(lmdbStore({ path: db.path }), (drafts) => {
      if (!failed && drafts.some((d) => d.type === 'tool/result')) {
        failed = true;
        throw new Error('disk hiccup');
      }
    });
    const runs: string[] = [];
    const charge = defineTool({
      name: 'charge',
      description: '',
      parameters: z.object({}),
      resources: ['card'],
      execute: () => (runs.push('charge'), 'charged'),
    });
    const rt = db.rt(
      { model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'charge', arguments: {} }] }, 'done']), tools: [charge] },
      store,
    );
    const s = await rt.openSession('s');
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' });
    expect(runs).toEqual(['charge']);
    await rt.close();
    const model2 = scriptedModel(['next']);
    const rt2 = db.rt({ model: model2, tools: [charge] });
    const s2 = await rt2.openSession('s');
    const log = await logOf(rt2.store, 's');
    const answered = log.some((e) => e.type === 'tool/result' && e.payload.callId === 'c1');
    const reported = s2.recovery.uncertainToolCalls.some((c) => c.callId === 'c1');
    expect({ answered, reported, historyConsistent: r.historyConsistent }).not.toEqual({
      answered: false,
      reported: false,
      historyConsistent: true,
    });
    await s2.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b1', message: 'next' });
    const msgs = model2.requests[0]!.messages;
    const unanswered = msgs
      .flatMap((m) => (m.role === 'assistant' ? (m.toolCalls ?? []).map((c) => c.id) : []))
      .filter((id) => !msgs.some((m) => m.role === 'tool' && m.toolCallId === id));
    expect(unanswered).toEqual([]);
  });
});
