import { describe, expect, it } from 'vitest';
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel } from '../../src/index.js';

/** The states each machine id passed through (consecutive repeats folded), from the runtime's inspect option. */
function stateTrace() {
  const byMachine = new Map<string, string[]>();
  const inspect = (e: InspectionEvent) => {
    if (e.type !== '@xstate.snapshot') return;
    const id = (e.actorRef as AnyActorRef & { logic?: { id?: string; config?: unknown } }).logic;
    if (!id?.config || !id.id) return;
    const value = (e.snapshot as { value?: unknown }).value;
    if (typeof value !== 'string') return;
    const list = byMachine.get(id.id) ?? [];
    if (list.at(-1) !== value) list.push(value);
    byMachine.set(id.id, list);
  };
  return { inspect, byMachine };
}

describe('the session machine as the inspector sees it', () => {
  it('an approval passes through suspended and back: idle → … → suspended → preparing → executing → finalizing → idle', async () => {
    const trace = stateTrace();
    const pay = defineTool({ name: 'pay', description: 'pays', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }] }, 'Paid.']),
      tools: [pay],
      inspect: trace.inspect,
    });
    const s = await runtime.openSession('s');
    const asked = await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'pay' });
    expect(asked.status).toBe('suspended');
    expect(s.actor.getSnapshot().value).toBe('suspended');
    const done = await s.execute({
      kind: 'respond',
      runId: 'r1',
      attemptId: 'a2',
      questionId: asked.pendingRequest!.questionId,
      answer: { decisions: { p1: 'approve' } },
    });
    expect(done.status).toBe('succeeded');
    await s.waitForIdle();
    const session = trace.byMachine.get('session')!;
    const at = session.indexOf('suspended');
    expect(session.slice(0, at + 1)).toEqual(['idle', 'preparing', 'executing', 'finalizing', 'suspended']);
    expect(session.slice(at)).toEqual(['suspended', 'preparing', 'executing', 'finalizing', 'idle']);
    // the respond attempt's run goes straight to the approved batch
    expect(trace.byMachine.get('run')).toEqual(
      expect.arrayContaining(['committingIntent', 'ending', 'runningTools', 'committingResults', 'callingModel', 'delivering', 'done']),
    );
    await runtime.close();
    expect(s.actor.getSnapshot().value).toBe('closed');
  });

  it('a session opened on a run waiting for its answer starts suspended', async () => {
    const store = memoryStore();
    const pay = defineTool({ name: 'pay', description: 'pays', parameters: z.object({}), needsApproval: true, execute: () => 'paid' });
    const model = scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }] }, 'Paid.']);
    const first = createRuntime({ store, model, tools: [pay] });
    await (await first.openSession('s')).execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'pay' });
    const again = await createRuntime({ store, model, tools: [pay] }).openSession('s');
    expect(again.actor.getSnapshot().value).toBe('suspended');
  });
});
