import { describe, expect, it } from 'vitest';
import { initialView, reduceView, type StreamItem } from '../../src/web/view.js';
import type { ChildFrame, CommittedFrame } from '../../src/web/wire.js';

let seq = 0;
const rec = (type: string, payload: Record<string, unknown> = {}, runId = 'r1'): CommittedFrame => ({
  kind: 'committed',
  logSeq: ++seq,
  runId,
  record: {
    seq,
    eventId: `e${seq}`,
    type: type as CommittedFrame['record']['type'],
    turn: 1,
    step: 1,
    attempt: 1,
    occurredAt: '',
    payload,
  },
  events: [],
});
const fold = (items: StreamItem[]) => items.reduce(reduceView, initialView('s1'));
const live = (event: Extract<StreamItem, { kind: 'live' }>['event']): StreamItem => ({
  kind: 'live',
  runId: 'r1',
  attemptId: 'a1',
  afterLogSeq: 0,
  event,
});

describe('reduceView', () => {
  it('a record at or before lastLogSeq is counted as a repeat and changes nothing else', () => {
    seq = 0;
    const m = rec('user/message', { message: { role: 'user', content: 'hi' } });
    const v = fold([m, m]);
    expect(v.items).toHaveLength(1);
    expect(v.repeats).toBe(1);
    expect(v.lastLogSeq).toBe(1);
  });

  it('live text streams until its committed message, and a reconnect drops half a message', () => {
    seq = 0;
    const streaming = fold([
      rec('run/start'),
      live({ type: 'message_start', role: 'assistant' }),
      live({ type: 'message_delta', role: 'assistant', text: 'Hel' }),
    ]);
    expect(streaming.streaming?.text).toBe('Hel');
    expect(reduceView(streaming, { kind: 'connection', state: 'reconnecting', attempt: 1, lastLogSeq: 1 }).streaming).toBeUndefined();
    const done = reduceView(streaming, rec('assistant/message', { message: { role: 'assistant', content: 'Hello' } }));
    expect(done.streaming).toBeUndefined();
    expect(done.items.at(-1)).toMatchObject({ kind: 'assistant', text: 'Hello' });
  });

  it('the final answer is shown once: the assistant message it repeats becomes it', () => {
    seq = 0;
    const v = fold([
      rec('run/start'),
      rec('assistant/message', { message: { role: 'assistant', content: 'Done.' } }),
      rec('final/message', { content: 'Done.' }),
      rec('run/end', { status: 'succeeded' }),
    ]);
    expect(v.items.map((i) => i.kind)).toEqual(['final', 'run']);
    expect(v.runStatus).toBe('succeeded');
  });

  it('tool calls get their progress and outcome; an approval is pending until decided', () => {
    seq = 0;
    const pendingRequest = { kind: 'approval' as const, questionId: 'q1', calls: [{ callId: 'c1', name: 'deploy', arguments: {} }] };
    let v = fold([
      rec('run/start'),
      rec('tool/call', { callId: 'c1', name: 'deploy', arguments: { env: 'x' } }),
      live({ type: 'tool_update', callId: 'c1', name: 'deploy', update: { phase: 'rolling' } }),
    ]);
    expect(v.items.at(-1)).toMatchObject({ kind: 'tool', progress: { phase: 'rolling' } });
    v = reduceView(v, rec('tool/result', { callId: 'c1', outcome: { kind: 'completed', content: 'ok', isError: false } }));
    expect(v.items.at(-1)).toMatchObject({ kind: 'tool', outcome: { content: 'ok' } });
    v = reduceView(v, rec('approval/requested', { pendingRequest }));
    expect(v.pending).toEqual(pendingRequest);
    v = reduceView(v, rec('run/end', { status: 'suspended' }));
    expect(v.pending).toEqual(pendingRequest);
    v = reduceView(v, rec('session/attached'));
    expect(v.items.some((i) => i.kind === 'resumed')).toBe(false); // a suspended run is not cut off
    v = reduceView(v, rec('approval/decided', { decisions: { c1: 'approve' } }));
    expect(v.pending).toBeUndefined();
  });

  it('a cancel recorded while a run waits for its approval takes the approval away, across a restart before its cancelled end', () => {
    seq = 0;
    const pendingRequest = { kind: 'approval' as const, questionId: 'q1', calls: [{ callId: 'c1', name: 'deploy', arguments: {} }] };
    const v = fold([
      rec('run/start'),
      rec('approval/requested', { pendingRequest }),
      rec('run/end', { status: 'suspended' }),
      rec('run/start'),
      rec('cancellation/requested', { reason: 'not today' }),
      rec('session/attached'),
    ]);
    expect(v.pending).toBeUndefined();
    expect(v.items.find((i) => i.kind === 'approval')).not.toHaveProperty('decisions');
    expect(v.items.at(-1)).toMatchObject({ kind: 'resumed' });
  });

  it('a writer attaching while a run was running marks it resumed after a restart', () => {
    seq = 0;
    const v = fold([rec('run/start'), rec('tool/call', { callId: 'c1', name: 'deploy', arguments: {} }), rec('session/attached')]);
    expect(v.items.at(-1)).toEqual({ kind: 'resumed', seq: 3 });
  });

  it("a child session's frames fold into the item of its call's record: a child view of its own, repeats ignored, a grandchild nested in it", () => {
    seq = 0;
    const call = rec('tool/call', { callId: 'c1', name: 'researcher', arguments: { input: 'tea?' } });
    // a later run's call of the same id (call ids come from the model): its item is the newest
    const again = rec('tool/call', { callId: 'c1', name: 'researcher', arguments: { input: 'coffee?' } }, 'r2');
    seq = 0; // the child's own log positions
    const childLog = [
      rec('run/start', { runId: 'answer' }, 'answer'),
      rec('tool/call', { callId: 'k1', name: 'checker', arguments: {} }, 'answer'),
      rec('final/message', { content: 'tea is hot' }, 'answer'),
      rec('run/end', { status: 'succeeded' }, 'answer'),
    ];
    const inChild = (frame: ChildFrame['frame']): ChildFrame => ({
      kind: 'child',
      callId: 'c1',
      callSeq: 1,
      sessionId: 's1/r1/1/c1',
      frame,
    });
    seq = 0;
    const grandchild = inChild({
      kind: 'child',
      callId: 'k1',
      callSeq: 2,
      sessionId: 's1/r1/1/c1/answer/1/k1',
      frame: rec('final/message', { content: 'hot' }),
    });
    const delta = inChild({
      kind: 'live',
      runId: 'answer',
      attemptId: 'answer',
      afterLogSeq: 1,
      event: { type: 'message_start', role: 'assistant' },
    });
    const early = inChild(childLog[0]!); // before its call's record: no item to fold it into
    const v = fold([early, call, again, ...childLog.slice(0, 2).map(inChild), delta, grandchild, ...childLog.map(inChild)]);
    expect(v.lastLogSeq).toBe(2); // the parent's cursor: child frames do not move it
    const [item, later] = v.items;
    if (item?.kind !== 'tool' || later?.kind !== 'tool') throw new Error('expected the two calls');
    expect(later.child).toBeUndefined();
    expect(item.child).toMatchObject({ sessionId: 's1/r1/1/c1', lastLogSeq: 4, repeats: 2, runStatus: 'succeeded' });
    expect(item.child!.streaming).toEqual({ runId: 'answer', text: '' });
    expect(item.child!.items.map((i) => i.kind)).toEqual(['tool', 'final', 'run']);
    const inner = item.child!.items[0]!;
    expect(inner.kind === 'tool' && inner.child?.items).toEqual([{ kind: 'final', seq: 1, runId: 'r1', text: 'hot' }]);
  });
});
