import { afterEach, describe, expect, it } from 'vitest';
import { createInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { agentTool, createRuntime, defineAgent, memoryStore, scriptedModel } from '../../src/index.js';

// A running child session is a child actor of its parent's tool-call actor, as the inspector sees it.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Seen = AnyActorRef & { _parent?: Seen; src?: unknown; logic?: { config?: { id?: string } } };
const machineOf = (ref: Seen) => ref.logic?.config?.id;

describe('child sessions in the inspector', () => {
  it("each child session's root actor is reported with the parent's tool-call actor as its parent, in the parent's tree", async () => {
    const events: InspectionEvent[] = [];
    const researcher = defineAgent({
      name: 'researcher',
      instructions: 'r',
      model: scriptedModel([(req) => `notes on ${req.messages.at(-1)?.content}`], { loop: true }),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([
        { toolCalls: ['tea', 'coffee'].map((input, i) => ({ id: `c${i}`, name: 'researcher', arguments: { input } })) },
        'done',
      ]),
      tools: [agentTool(researcher, { mode: 'parallel' })],
      inspect: (e) => events.push(e),
    });
    cleanups.push(() => runtime.close());
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'r', message: 'go' })).status).toBe('succeeded');

    const announced = events.filter((e) => e.type === '@xstate.actor').map((e) => ({ ref: e.actorRef as Seen, rootId: e.rootId }));
    const sessions = announced.filter((a) => machineOf(a.ref) === 'session');
    const parentRoot = sessions.find((a) => (a.ref.getSnapshot() as { context: { sessionId: string } }).context.sessionId === 's')!;
    const children = sessions.filter((a) => a !== parentRoot);
    expect(children.map((c) => (c.ref.getSnapshot() as { context: { sessionId: string } }).context.sessionId).sort()).toEqual([
      's/r/1/c0',
      's/r/1/c1',
    ]);
    for (const child of children) {
      const call = child.ref._parent!;
      expect(call.src).toBe('toolCall');
      const callId = (call.getSnapshot() as { input: { call: { callId: string } } }).input.call.callId;
      expect((child.ref.getSnapshot() as { context: { sessionId: string } }).context.sessionId).toBe(`s/r/1/${callId}`);
      // the tool-call actor is the parent session's: toolBatch → run → session
      expect(machineOf(call._parent!)).toBe('toolBatch');
      expect(call._parent!._parent!._parent).toBe(parentRoot.ref);
      expect(child.rootId).toBe(parentRoot.ref.sessionId);
    }
    // every event of a child's actors (its run, its tool batch…) is in the parent's tree
    const childIds = new Set(children.map((c) => c.ref.sessionId));
    const childRuns = announced.filter((a) => machineOf(a.ref) === 'run' && childIds.has((a.ref._parent as Seen).sessionId));
    expect(childRuns).toHaveLength(2);
    for (const run of childRuns) expect(run.rootId).toBe(parentRoot.ref.sessionId);

    // the Stately inspector's own conversion: each child session is an actor whose parent is its tool call, in one tree
    const sent: StatelyInspectionEvent[] = [];
    const inspector = createInspector({ send: (e: StatelyInspectionEvent) => void sent.push(e), start() {}, stop() {} });
    for (const e of events) inspector.inspect.next?.(e);
    await new Promise((r) => setTimeout(r, 50)); // it converts events on the next tick
    inspector.stop();
    for (const child of children) {
      const converted = sent.find((e) => e.type === '@xstate.actor' && e.sessionId === child.ref.sessionId) as {
        parentId?: string;
        rootId?: string;
      };
      expect(converted).toMatchObject({ parentId: child.ref._parent!.sessionId, rootId: parentRoot.ref.sessionId });
    }
  });
});
