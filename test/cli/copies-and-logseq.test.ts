import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { logCommand, type CommandIO } from '../../src/cli/commands.js';
import { Progress } from '../../src/cli/progress.js';
import { buildTimeline } from '../../src/cli/timeline-model.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { defineTool, scriptedModel } from '../../src/index.js';
import type { Envelope } from '../../src/streams/envelopes.js';
import { lmdbRuntime, logOf, sleep } from '../helpers/runtime.js';
import { LogBuilder } from './timeline-fixture.js';

function capture(): CommandIO & { out: { text: string } } {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (_s: string) => true };
  return { out, err, onInterrupt: () => () => {} };
}

/**
 * Run r1 fills the context; run r2 asks for two deploys needing approval; the respond approves
 * one and denies the other; the next model step compacts (copies of r2's user message,
 * assistant message and both results, with copiedFrom), then answers.
 */
async function compactedApproval() {
  const deploy = defineTool({
    name: 'deploy',
    description: '',
    parameters: z.object({ env: z.string() }),
    needsApproval: true,
    execute: ({ env }) => `deployed ${env} ${'y'.repeat(4000)}`,
  });
  const model = scriptedModel([
    'ok',
    {
      text: 'deploying',
      toolCalls: [
        { name: 'deploy', arguments: { env: 'a' } },
        { name: 'deploy', arguments: { env: 'b' } },
      ],
    },
    'SUMMARY',
    'all done',
  ]);
  const { runtime, store, path } = lmdbRuntime({ model, tools: [deploy], config: { contextWindow: 2000, outputReserve: 200 } });
  const s = await runtime.openSession('s');
  const envs: Envelope[] = [];
  s.events$.subscribe((e) => envs.push(e));
  await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'x'.repeat(4000) });
  const r = await s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'deploy it' });
  const pr = r.pendingRequest as { questionId: string; calls: { callId: string }[] };
  const decisions = { [pr.calls[0]!.callId]: 'approve' as const, [pr.calls[1]!.callId]: 'deny' as const };
  const r2 = await s.execute({ kind: 'respond', runId: 'r2', attemptId: 'resp', questionId: pr.questionId, answer: { decisions } });
  expect(r2.status).toBe('succeeded');
  const log = await logOf(store, 's');
  expect(log.some((e) => e.type === 'compaction')).toBe(true);
  return { runtime, session: s, store, path, envs, log };
}

const copies = (log: EventRecord[]) => log.filter((e) => e.payload.copiedFrom !== undefined);

describe('view (timeline model): compaction copies', () => {
  it('a compaction copy of an assistant message is not drawn as a second model call', async () => {
    const { log } = await compactedApproval();
    const copySeqs = new Set(copies(log).map((e) => e.seq));
    expect([...copySeqs].length).toBeGreaterThan(0);
    const model = buildTimeline('s', log).spans.filter((s) => s.row === 'model');
    const originals = log.filter((e) => e.type === 'assistant/message' && e.payload.copiedFrom === undefined);
    expect(model.filter((s) => s.seqs.some((q) => copySeqs.has(q)))).toEqual([]);
    expect(model).toHaveLength(originals.length);
  });

  it('a compaction copy does not stretch the suspended step it was copied from across the approval wait', () => {
    const b = new LogBuilder('s');
    const hour = 3_600_000;
    const a1 = { turn: 1, attempt: 1 };
    const a2 = { turn: 1, attempt: 2 };
    const call = { id: 'p1', name: 'pay', arguments: '{}' };
    const pending = { kind: 'approval', questionId: 'approval-p1', calls: [{ callId: 'p1', name: 'pay', arguments: {} }] };
    b.add(0, 'session/attached', { sessionInstanceId: 'i', writerEpoch: 1 });
    b.add(10, 'run/start', { runId: 'r', attemptId: 'a', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f' }, a1);
    const user = b.add(10, 'user/message', { message: { role: 'user', content: 'pay' } }, a1);
    b.add(400, 'step/start', {}, { ...a1, step: 1 });
    const asst = b.add(
      400,
      'assistant/message',
      { message: { role: 'assistant', content: '', toolCalls: [call] }, finishReason: 'tool_calls', latencyMs: 390 },
      { ...a1, step: 1 },
    );
    b.add(400, 'approval/requested', { pendingRequest: pending }, { ...a1, step: 1 });
    b.add(400, 'run/suspended', { pendingRequest: pending }, { ...a1, step: 1 });
    b.add(405, 'run/end', { runId: 'r', attemptId: 'a', status: 'suspended', outcome: 'suspended' }, { ...a1, step: 1 });
    b.add(
      hour,
      'run/start',
      { runId: 'r', attemptId: 'b', runEpoch: 2, kind: 'respond', executionProfileFingerprint: 'f' },
      { ...a2, step: 1 },
    );
    b.add(hour, 'approval/decided', { questionId: 'approval-p1', decisions: { p1: 'approve' }, timedOut: false }, { ...a2, step: 1 });
    b.add(
      hour,
      'tool/call',
      { callId: 'p1', name: 'pay', arguments: {}, rawArguments: '{}', mode: 'exclusive', resources: [], idempotencyKey: 's/r/p1' },
      { ...a2, step: 1 },
    );
    const res = b.add(
      hour + 50,
      'tool/result',
      {
        callId: 'p1',
        name: 'pay',
        outcome: { kind: 'completed', content: 'paid', isError: false, concludesTurn: false, releaseResources: [] },
        startedAt: b.t(hour + 5),
        endedAt: b.t(hour + 45),
      },
      { ...a2, step: 1 },
    );
    b.add(hour + 50, 'step/end', {}, { ...a2, step: 1 });
    b.add(hour + 100, 'compaction', { summary: { role: 'user', content: 'earlier' }, replacedThroughSeq: 1 }, { ...a2, step: 2 });
    // the copies keep the turn/step/attempt of their originals (src/actors/compaction.ts)
    for (const e of [user, asst, res])
      b.add(hour + 100, e.type, { ...e.payload, copiedFrom: e.seq }, { turn: e.turn, step: e.step, attempt: e.attempt });
    const m = buildTimeline('s', b.events);
    const suspendedStep = m.spans.find((s) => s.row === 'step' && s.seqs.includes(asst.seq))!;
    // the step of attempt 1 ended with its suspension (t=405); the copies were written an hour later
    expect(suspendedStep.end).toBeLessThan(b.t(hour));
  });
});

describe('log / tail / view table: compaction copies', () => {
  it('`actorloop log` marks a compaction copy as a copy, not as a second user message / tool result', async () => {
    const { runtime, path, log } = await compactedApproval();
    await runtime.close();
    const io = capture();
    await logCommand('s', { data: path }, io);
    const userCopy = copies(log).find((e) => e.type === 'user/message')!;
    const line = io.out.text.split('\n').find((l) => l.trimStart().startsWith(`${userCopy.seq} `))!;
    expect(line).toContain('user: deploy it');
    // the same text as the original's line, with nothing saying it is seq N's copy
    expect(line).toMatch(new RegExp(`cop(y|ied).*\\b${userCopy.payload.copiedFrom}\\b`));
  });
});

describe('envelopes: DESIGN §6 logSeq and tool_end', () => {
  it('approval_requested (published after approval/requested is committed) carries its logSeq', async () => {
    const { envs, log } = await compactedApproval();
    const requested = log.find((e) => e.type === 'approval/requested')!;
    const env = envs.find((e) => e.event.type === 'approval_requested')!;
    expect(env.logSeq).toBe(requested.seq);
  });

  it('step_end (published after step/end is committed) carries its logSeq', async () => {
    const { envs, log } = await compactedApproval();
    const stepEnds = log.filter((e) => e.type === 'step/end').map((e) => e.seq);
    const envSeqs = envs.filter((e) => e.event.type === 'step_end').map((e) => e.logSeq);
    expect(envSeqs).toEqual(stepEnds);
  });

  it("a steer's input_committed (published after its user/message is committed) carries its logSeq", async () => {
    const slow = defineTool({ name: 'slow', description: '', parameters: z.object({}), execute: async () => (await sleep(100), 'ok') });
    const { runtime, store } = lmdbRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'slow', arguments: {} }] }, 'done']),
      tools: [slow],
    });
    const s = await runtime.openSession('t');
    const envs: Envelope[] = [];
    s.events$.subscribe((e) => envs.push(e));
    const p = s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
    await sleep(30);
    await s.submitInput({ inputId: 'st1', message: 'also this', mode: 'steer' });
    expect((await p).status).toBe('succeeded');
    const msg = (await logOf(store, 't')).find((e) => e.type === 'user/message' && e.payload.inputId === 'st1')!;
    const env = envs.find((e) => e.event.type === 'input_committed')!;
    expect(env.logSeq).toBe(msg.seq);
  });

  it("a step failure's committed skipped tool/results and step/end get tool_end / step_end envelopes", async () => {
    const pay = defineTool({
      name: 'pay',
      description: '',
      parameters: z.object({ n: z.number() }),
      needsApproval: (a) => {
        if (a.n === 2) throw new Error('boom');
        return false;
      },
      execute: ({ n }) => `paid ${n}`,
    });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'pay', arguments: { n: 1 } },
          { name: 'pay', arguments: { n: 2 } },
        ],
      },
      'done',
    ]);
    const { runtime, store } = lmdbRuntime({ model, tools: [pay] });
    const s = await runtime.openSession('s');
    const envs: Envelope[] = [];
    s.events$.subscribe((e) => envs.push(e));
    const r = await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'pay' });
    expect(r.status).toBe('failed');
    const log = await logOf(store, 's');
    const results = log.filter((e) => e.type === 'tool/result');
    expect(results.map((e) => (e.payload.outcome as { kind: string }).kind)).toEqual(['skipped', 'skipped']);
    // emitToolEnds' rule: a tool_end (with its logSeq) for each committed tool/result
    const ends = envs.filter((e) => e.event.type === 'tool_end');
    expect(ends.map((e) => e.logSeq)).toEqual(results.map((e) => e.seq));
    expect(envs.filter((e) => e.event.type === 'step_end')).toHaveLength(1);
    // so the demo's progress shows the calls the model asked for ending
    let out = '';
    const progress = new Progress({ write: (t: string) => (out += t) }, { tty: false, color: false, modes: new Map() });
    for (const e of envs) progress.onEnvelope(e);
    progress.stop();
    expect(out).toContain('model asks for 2 tool calls');
    expect(out.match(/tool end {3}pay .* skipped: not run: the step failed/g)).toHaveLength(2);
  });
});
