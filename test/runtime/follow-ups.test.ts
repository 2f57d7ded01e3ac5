import { BehaviorSubject } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import {
  createRuntime,
  defineTool,
  isValidationError,
  lmdbStore,
  scriptedModel,
  ValidationError,
  type EventStore,
} from '../../src/index.js';
import { flakyStore, type Flaky } from '../helpers/flaky-store.js';
import { lmdbPath as lmdbPathFor } from '../helpers/lmdb-path.js';
import { lmdbRuntime, logOf, sleep, storeWithAppend, within } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

// follow_up inputs: each starts a new run (runId = inputId) once the session has no open run.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const lmdbPath = () => lmdbPathFor(cleanups);

/** An EventStore wrapper whose getEventById can be delayed (a slow read). */
function slowReads(inner: EventStore, delay: (eventId: string) => Promise<void> | void): EventStore {
  const s = storeWithAppend(inner, (...a) => inner.append(...a));
  return {
    ...s,
    getEventById: async (id, e) => {
      await delay(e);
      return inner.getEventById(id, e);
    },
  };
}

describe('follow-up inputs', () => {
  it('follow-up inputs start a new run when the current one settles (runId = inputId), and at once when idle', async () => {
    const model = scriptedModel([{ text: 'first', delayMs: 30 }, 'second', 'third']);
    const delivered: string[] = [];
    const { runtime, store } = lmdbRuntime({ model, delivery: { deliver: async (f) => void delivered.push(`${f.runId}:${f.content}`) } });
    const s = await runtime.openSession('s');
    const finished: string[] = [];
    s.events$.subscribe((e) => e.event.type === 'execution_finished' && finished.push(`${e.event.result.runId}:${e.event.result.status}`));
    const first = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' });
    await s.submitInput({ inputId: 'f1', message: 'two', mode: 'follow_up' });
    expect((await first).finalMessage).toBe('first');
    await s.waitForIdle();
    expect(finished).toEqual(['r1:succeeded', 'f1:succeeded']);
    await s.submitInput({ inputId: 'f2', message: 'three', mode: 'follow_up' });
    await s.waitForIdle();
    expect(delivered).toEqual(['r1:first', 'f1:second', 'f2:third']);
    const starts = (await logOf(store, 's')).filter((e) => e.type === 'run/start').map((e) => [e.payload.runId, e.payload.kind, e.turn]);
    expect(starts).toEqual([
      ['r1', 'prompt', 1],
      ['f1', 'follow_up', 2],
      ['f2', 'follow_up', 3],
    ]);
  });

  it('a follow-up still pending when the session is reopened starts, and waitForIdle resolves', async () => {
    const db = lmdbPath();
    // the kill switch keeps the follow-up from starting in the first process (as a crash between
    // input/accepted and run/start would)
    const rt1 = db.rt({ model: scriptedModel([]), killSwitch: new BehaviorSubject(true) });
    const s1 = await rt1.openSession('s');
    await s1.submitInput({ inputId: 'f1', message: 'later', mode: 'follow_up' });
    await rt1.close();
    const rt2 = db.rt({ model: scriptedModel(['done']) });
    const s2 = await rt2.openSession('s');
    expect(await within(s2.waitForIdle(), 1000)).not.toBe('still pending');
    const log = await logOf(rt2.store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'f1')?.payload.status).toBe('succeeded');
  });

  it('a follow-up submitted while the kill switch was set starts once the switch is cleared', async () => {
    const db = lmdbPath();
    const ks = new BehaviorSubject<boolean>(true);
    const rt = db.rt({ model: scriptedModel(['done']), killSwitch: ks });
    const s = await rt.openSession('s');
    await s.submitInput({ inputId: 'f1', message: 'later', mode: 'follow_up' });
    ks.next(false);
    expect(await within(s.waitForIdle(), 1000)).not.toBe('still pending');
    const log = await logOf(rt.store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'f1')?.payload.status).toBe('succeeded');
  });

  // guarantees.md, submitInput: "follow_up: starts a new run (runId = inputId) when the current one
  // settles, at once when idle". An execute that only returns a recorded result (or is refused after
  // reading the log) ends through settleIdle(), which never starts the follow-up accepted meanwhile.
  it('a follow-up accepted while an execute is returning a recorded result starts once that execute returns', async () => {
    const db = lmdbPath();
    let slow = false;
    // a slow log read (a busy disk): the re-execute below is still reading while the follow-up is accepted
    const store = slowReads(lmdbStore({ path: db.path }), async (e) => {
      if (slow && e === 'run-end:r1:a1') await sleep(300);
    });
    const rt = db.rt({ model: scriptedModel(['first', 'second']) }, store);
    const s = await rt.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' })).status).toBe('succeeded');
    slow = true;
    const again = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' });
    expect((await s.submitInput({ inputId: 'f1', message: 'two', mode: 'follow_up' })).status).toBe('accepted');
    expect((await again).status).toBe('succeeded'); // the recorded result, nothing run
    await within(s.waitForIdle(), 1500);
    await sleep(300);
    const log = await logOf(rt.store, 's');
    expect(log.find((e) => e.type === 'run/end' && e.payload.runId === 'f1')?.payload.status).toBe('succeeded');
  });

  // Guards against (seen in scenarios-steering.test.ts, seed 79): run r1 suspends for an approval while a
  // follow_up f1 waits; the read of the log after the attempt ends (getHead) fails once (a transient
  // store error) and f1 starts at once although r1 is still open (suspended). f1's model request then
  // holds r1's assistant tool call with no result, and r1 is orphaned (never settled, and no longer
  // reported by recovery). guarantees.md: "follow_up: starts a new run (runId = inputId) when the
  // current one settles"; "While another run of the session is open (suspended, detached,
  // interrupted) a new prompt is refused with ExecutionBusy naming it: answer or continue it first";
  // guarantees.md: "so no tool call is ever left unanswered on the surface".
  it('a transient read error after a suspension starts no waiting follow-up over the suspended run', async () => {
    const dir = tempDir();
    const wire = defineTool({ name: 'wire', description: '', needsApproval: true, parameters: z.object({}), execute: async () => 'wired' });
    const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: 'wire', arguments: {} }], delayMs: 30 }, 'follow-up answer', 'x', 'y']);
    const inner = lmdbStore({ path: dir.path });
    const f: Flaky = { failAppendIn: 0, failReadIn: 0, appendFailures: 0, readFailures: 0 };
    const flaky = flakyStore(inner, f);
    const store: EventStore = {
      ...flaky,
      append: async (id, ep, seq, drafts) => {
        const out = await inner.append(id, ep, seq, drafts);
        // the next read (the session's reload of the open run) fails once
        if (drafts.some((d) => d.type === 'run/end' && (d.payload as { status?: string }).status === 'suspended')) f.failReadIn = 1;
        return out;
      },
    };
    const rt = createRuntime({ store, model, tools: [wire] });
    const s = await rt.openSession('s');
    const first = s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'pay' });
    await sleep(5);
    await s.submitInput({ inputId: 'f1', message: 'later', mode: 'follow_up' });
    const res = await first;
    await s.waitForIdle();
    const log = await logOf(rt.store, 's');
    await rt.close();
    await dir.cleanup();
    expect(res.status).toBe('suspended');
    expect(f.readFailures).toBe(1);
    const unanswered = model.requests.flatMap((q, i) =>
      q.messages.flatMap((m, j) =>
        (m.toolCalls ?? [])
          .filter((c) => !q.messages.slice(j + 1).some((x) => x.role === 'tool' && x.toolCallId === c.id))
          .map((c) => `request ${i}: ${c.id}`),
      ),
    );
    expect({
      runsStarted: log.filter((e) => e.type === 'run/start').map((e) => e.payload.runId),
      unanswered,
    }).toEqual({ runsStarted: ['r1'], unanswered: [] });
  });
});

describe('follow-up run ids', () => {
  it('a follow_up whose inputId names an earlier run is refused at submitInput', async () => {
    const db = lmdbPath();
    const rt = db.rt({ model: scriptedModel(['first', 'second']) });
    const s = await rt.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'one' })).status).toBe('succeeded');
    const results: ExecutionResult[] = [];
    s.events$.subscribe((e) => e.event.type === 'execution_finished' && results.push(e.event.result));
    const got = await s.submitInput({ inputId: 'r1', message: 'two', mode: 'follow_up' }).catch((e: unknown) => e);
    await within(s.waitForIdle(), 1000);
    // either refused up front, or run as its own run; never accepted and then failed
    if (!isValidationError(got)) expect(results.map((r) => r.status)).toEqual(['succeeded']);
    else expect(results).toEqual([]);
  });

  it('a follow-up submitted while a prompt with the same runId is starting is refused at submitInput', async () => {
    const { runtime } = lmdbRuntime({ model: scriptedModel(['first', 'second']) });
    const s = await runtime.openSession('s');
    const p = s.execute({ kind: 'prompt', runId: 'X', attemptId: 'a1', message: 'go' });
    const sub = s.submitInput({ inputId: 'X', mode: 'follow_up', message: 'more' });
    const outcome = await sub.then(
      (receipt) => ({ receipt }),
      (e: unknown) => ({ error: e }),
    );
    const r = await p;
    expect(r.status).toBe('succeeded');
    await s.waitForIdle();
    const followUpEnd = (await logOf(runtime.store, 's')).find((e) => e.type === 'run/end' && e.payload.attemptId === 'X');
    // either the runId is refused up front (DESIGN: a run id names one run) or the follow-up runs;
    // it must not be accepted durably and then fail on the run/start id it can never write
    const refused = 'error' in outcome && outcome.error instanceof ValidationError;
    expect(refused ? 'refused' : `accepted, follow-up run ${String(followUpEnd?.payload.status)}`).toMatch(
      /^(refused|accepted, follow-up run succeeded)$/,
    );
  });
});
