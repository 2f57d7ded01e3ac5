import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, lmdbStore, memoryStore, scriptedModel } from '../../src/index.js';
import { logOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

describe('approvals answered per call (docs/approvals.md)', () => {
  it('each decision is durable before it resolves and counts after a restart; the run resumes once every call is decided', async () => {
    const dir = tempDir();
    const paid: number[] = [];
    const lives = (replies: Parameters<typeof scriptedModel>[0]) =>
      createRuntime({
        store: lmdbStore({ path: dir.path }),
        model: scriptedModel(replies),
        tools: [
          defineTool({
            name: 'pay',
            description: '',
            parameters: z.object({ n: z.number() }),
            execute: ({ n }) => (paid.push(n), 'paid'),
          }),
        ],
        approvalFor: ['pay'],
      });
    const rt1 = lives([
      {
        toolCalls: [
          { id: 'c1', name: 'pay', arguments: { n: 1 } },
          { id: 'c2', name: 'pay', arguments: { n: 2 } },
        ],
      },
    ]);
    const s1 = await rt1.openSession('s');
    expect((await s1.run('pay both').result).status).toBe('suspended');
    expect(await s1.approve('c1')).toMatchObject({ callId: 'c1', decision: 'approve', undecided: ['c2'] });
    expect((await s1.approve('c1')).undecided).toEqual(['c2']); // the same decision again: idempotent
    await expect(s1.deny('c1')).rejects.toMatchObject({ name: 'ValidationError', message: expect.stringContaining('already decided') });
    await expect(s1.approve('c9')).rejects.toMatchObject({ name: 'ValidationError' });
    expect(s1.snapshot().status).toBe('suspended'); // nothing resumed yet
    await rt1.close();

    const rt2 = lives(['paid one of two']);
    const s2 = await rt2.openSession('s');
    const last = await s2.deny('c2');
    expect(last.undecided).toEqual([]);
    const result = await last.run!.result;
    expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'paid one of two' });
    expect(paid).toEqual([1]);
    const log = await logOf(rt2.store, 's');
    expect(log.filter((e) => e.type === 'approval/call-decided').map((e) => [e.payload.callId, e.payload.decision])).toEqual([
      ['c1', 'approve'],
      ['c2', 'deny'],
    ]);
    expect(log.find((e) => e.type === 'approval/decided')!.payload.decisions).toEqual({ c1: 'approve', c2: 'deny' });
    await expect(s2.approve('c1')).rejects.toMatchObject({ name: 'ValidationError', message: expect.stringContaining('no approval') });
    await rt2.close();
    await dir.cleanup();
  });

  it('a respond keeps the decisions approve/deny recorded: a call it leaves out takes its recorded one, a contradiction is refused', async () => {
    const paid: number[] = [];
    const rt = createRuntime({
      store: memoryStore(),
      model: scriptedModel([
        {
          toolCalls: [
            { id: 'c1', name: 'pay', arguments: { n: 1 } },
            { id: 'c2', name: 'pay', arguments: { n: 2 } },
          ],
        },
        'done',
      ]),
      tools: [
        defineTool({ name: 'pay', description: '', parameters: z.object({ n: z.number() }), execute: ({ n }) => (paid.push(n), 'paid') }),
      ],
      approvalFor: ['pay'],
    });
    const s = await rt.openSession('s');
    const r = await s.run('pay both').result;
    const { runId, questionId } = { runId: r.runId, questionId: r.pendingRequest!.questionId };
    await s.approve('c1');
    const contradicting = s.execute({
      kind: 'respond',
      runId,
      attemptId: 'a2',
      questionId,
      answer: { decisions: { c1: 'deny', c2: 'approve' } },
    });
    await expect(contradicting).rejects.toMatchObject({
      name: 'ValidationError',
      message: expect.stringContaining('c1 was already decided: approve'),
    });
    const result = await s.execute({ kind: 'respond', runId, attemptId: 'a3', questionId, answer: { decisions: { c2: 'approve' } } });
    expect(result).toMatchObject({ status: 'succeeded', finalMessage: 'done' });
    expect(paid).toEqual([1, 2]);
    const log = await logOf(rt.store, 's');
    expect(log.find((e) => e.type === 'approval/decided')!.payload.decisions).toEqual({ c1: 'approve', c2: 'approve' });
    await rt.close();
  });

  it('approve and deny reject (never throw) a bad call id, and a session closed', async () => {
    const rt = createRuntime({ store: memoryStore(), model: scriptedModel([]) });
    const s = await rt.openSession('s');
    /** How the call fails: it must return a rejected promise, like every other method that returns one. */
    const failure = (call: () => Promise<unknown>) => {
      let promise: Promise<unknown>;
      try {
        promise = call();
      } catch (e) {
        return { thrown: (e as Error).name };
      }
      return promise.then(
        () => ({ resolved: true }),
        (e: Error) => ({ rejected: e.name }),
      );
    };
    expect(await failure(() => s.approve(1 as never))).toEqual({ rejected: 'ValidationError' });
    expect(await failure(() => s.deny(''))).toEqual({ rejected: 'ValidationError' });
    await s.close();
    expect(await failure(() => s.approve('c1'))).toEqual({ rejected: 'StoreClosedError' });
    expect(await failure(() => s.deny('c1'))).toEqual({ rejected: 'StoreClosedError' });
    await rt.close();
  });
});
