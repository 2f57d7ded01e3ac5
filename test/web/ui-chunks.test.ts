import { DefaultChatTransport, readUIMessageStream, type UIMessage as AiUIMessage } from 'ai';
import { describe, expect, it } from 'vitest';
import { UIChunkMapper } from '../../src/web/ui-chunks.js';
import type { UIChunk } from '../../src/web/ui-protocol.js';
import { UIMessageBuilder, uiMessagesOf } from '../../src/web/ui-messages.js';
import type { WireRecord } from '../../src/web/wire.js';

let seq = 0;
const rec = (type: string, payload: Record<string, unknown>, step = 1): WireRecord => ({
  seq: ++seq,
  eventId: `e${seq}`,
  type: type as WireRecord['type'],
  turn: 1,
  step,
  attempt: 1,
  occurredAt: new Date(0).toISOString(),
  payload,
});
const completed = (content: string, isError = false) => ({
  kind: 'completed',
  content,
  isError,
  concludesTurn: false,
  releaseResources: [],
});

/** The chunks the AI SDK's own client code reads: its SSE parser, its chunk schema, its message builder. */
async function throughAiSdk(chunks: UIChunk[], message?: AiUIMessage): Promise<AiUIMessage | undefined> {
  const body = chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n';
  const transport = new DefaultChatTransport({
    api: 'http://x/chat',
    fetch: async () => new Response(body, { headers: { 'content-type': 'text/event-stream' } }),
  });
  const stream = await transport.sendMessages({
    chatId: 's',
    messages: [],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  let last: AiUIMessage | undefined;
  for await (const m of readUIMessageStream({ stream, ...(message ? { message } : {}), terminateOnError: true })) last = m;
  return last;
}
const plain = (v: unknown) => JSON.parse(JSON.stringify(v)) as unknown;

describe('UIChunkMapper: each event kind → its UI message chunks', () => {
  seq = 0;
  const thinking = {
    anthropic: {
      content: [
        { type: 'thinking', thinking: 'weigh it', signature: 's' },
        { type: 'text', text: 'x' },
      ],
    },
  };
  const calls = [
    { callId: 'c1', name: 'read', arguments: { path: 'a' } },
    { callId: 'c2', name: 'deploy', arguments: { env: 'prod' } },
    { callId: 'c3', name: 'deploy', arguments: { env: 'dev' } },
  ];
  const log: [WireRecord, UIChunk[]][] = [
    [rec('run/start', { runId: 'i1', kind: 'prompt', inputId: 'i1' }, 0), []],
    [
      rec('user/message', { message: { role: 'user', content: 'go' } }, 0),
      [
        { type: 'start', messageId: 'i1-reply', messageMetadata: { sessionId: 's', fromSeq: 2 } },
        { type: 'data-actorloop-run', id: 'i1', data: { runId: 'i1', kind: 'prompt', status: 'running' } },
      ],
    ],
    [rec('step/start', {}), [{ type: 'start-step' }]],
    [
      rec('assistant/message', { message: { role: 'assistant', content: 'reading', providerData: thinking } }),
      [
        { type: 'reasoning-start', id: 'r4-0' },
        { type: 'reasoning-delta', id: 'r4-0', delta: 'weigh it' },
        { type: 'reasoning-end', id: 'r4-0' },
        { type: 'text-start', id: 't4' },
        { type: 'text-delta', id: 't4', delta: 'reading' },
        { type: 'text-end', id: 't4' },
      ],
    ],
    [rec('tool/call', calls[0]!), [{ type: 'tool-input-available', toolCallId: 'c1', toolName: 'read', input: { path: 'a' } }]],
    [
      rec('tool/result', { callId: 'c1', name: 'read', outcome: completed('A') }),
      [{ type: 'tool-output-available', toolCallId: 'c1', output: 'A' }],
    ],
    [rec('step/end', {}), [{ type: 'finish-step' }]],
    [rec('step/start', {}, 2), [{ type: 'start-step' }]],
    [
      rec('approval/requested', { pendingRequest: { kind: 'approval', questionId: 'q1', calls: calls.slice(1) } }, 2),
      [
        { type: 'tool-input-available', toolCallId: 'c2', toolName: 'deploy', input: { env: 'prod' } },
        { type: 'tool-approval-request', approvalId: 'approve-c2', toolCallId: 'c2' },
        { type: 'tool-input-available', toolCallId: 'c3', toolName: 'deploy', input: { env: 'dev' } },
        { type: 'tool-approval-request', approvalId: 'approve-c3', toolCallId: 'c3' },
      ],
    ],
    [
      rec('run/end', { runId: 'i1', status: 'suspended' }, 2),
      [{ type: 'data-actorloop-run', id: 'i1', data: { runId: 'i1', kind: 'prompt', status: 'suspended' } }],
    ],
    [
      rec('run/start', { runId: 'i1', kind: 'respond' }, 2),
      [{ type: 'data-actorloop-run', id: 'i1', data: { runId: 'i1', kind: 'respond', status: 'running' } }],
    ],
    [
      rec('approval/decided', { questionId: 'q1', decisions: { c2: 'deny', c3: 'approve' }, timedOut: false }, 2),
      [
        { type: 'tool-approval-response', approvalId: 'approve-c2', approved: false },
        { type: 'tool-output-denied', toolCallId: 'c2' },
        { type: 'tool-approval-response', approvalId: 'approve-c3', approved: true },
      ],
    ],
    [rec('tool/call', calls[2]!, 2), []],
    [rec('tool/result', { callId: 'c2', name: 'deploy', outcome: { kind: 'skipped', reason: 'denied' } }, 2), []],
    [
      rec('tool/result', { callId: 'c3', name: 'deploy', outcome: { kind: 'uncertain-hanging', content: 'lost', resourceLocks: [] } }, 2),
      [{ type: 'tool-output-error', toolCallId: 'c3', errorText: 'uncertain-hanging: lost' }],
    ],
    [
      rec('session/attached', { sessionInstanceId: 'x', writerEpoch: 2 }, 2),
      [{ type: 'data-actorloop-resumed', id: 'resumed-16', data: { seq: 16 } }],
    ],
    [
      rec('verification/rejected', { target: 'final', reason: 'too short' }, 2),
      [{ type: 'data-actorloop-verification', id: 'verification-17', data: { target: 'final', reason: 'too short' } }],
    ],
    [
      rec('question/asked', { pendingRequest: { kind: 'question', questionId: 'q2', callId: 'c9', question: 'which?' } }, 2),
      [{ type: 'data-actorloop-question', id: 'q2', data: { kind: 'question', questionId: 'q2', callId: 'c9', question: 'which?' } }],
    ],
    [rec('step/end', {}, 2), [{ type: 'finish-step' }]],
    [rec('step/start', {}, 3), [{ type: 'start-step' }]],
    [
      rec('assistant/message', { message: { role: 'assistant', content: 'Done.' } }, 3),
      [
        { type: 'text-start', id: 't21' },
        { type: 'text-delta', id: 't21', delta: 'Done.' },
        { type: 'text-end', id: 't21' },
      ],
    ],
    [
      rec('final/message', { finalMessageId: 'f1', content: 'Done.' }, 3),
      [{ type: 'data-actorloop-final', id: 'f1', data: { content: 'Done.' } }],
    ],
    [rec('delivery/committed', { finalMessageId: 'f1' }, 3), []],
    [
      rec('run/end', { runId: 'i1', status: 'succeeded' }, 3),
      [
        { type: 'data-actorloop-run', id: 'i1', data: { runId: 'i1', kind: 'respond', status: 'succeeded' } },
        { type: 'finish', finishReason: 'stop' },
      ],
    ],
  ];

  it('maps every record kind of a reply, and the reply ends at its run settling', () => {
    const m = new UIChunkMapper({ kind: 'input', inputId: 'i1' }, { sessionId: 's', knownLastSeq: 1_000 });
    for (const [r, expected] of log) {
      const out = m.committed(r);
      expect(out.chunks, `${r.seq} ${r.type}`).toEqual(expected);
      expect(out.end ?? false, `${r.seq} ${r.type}`).toBe(r.seq === log.length);
    }
  });

  it("every chunk passes the AI SDK's client (its SSE parser and chunk schema), which builds the message the history folds, key for key in the same order", async () => {
    const m = new UIChunkMapper({ kind: 'input', inputId: 'i1' }, { sessionId: 's', knownLastSeq: 1_000 });
    const chunks = log.flatMap(([r]) => m.committed(r).chunks);
    const built = await throughAiSdk(chunks);
    const history = uiMessagesOf(
      log.map(([r]) => r),
      's',
    );
    expect(history.map((h) => h.role)).toEqual(['user', 'assistant']);
    expect(plain(history[1])).toEqual(plain(built));
    // string-equal too: an app that compares or caches messages by their JSON sees one message
    expect(JSON.stringify(history[1])).toBe(JSON.stringify(built));
    const parts = built!.parts.map((p) => ('state' in p ? `${p.type}:${p.state}` : p.type));
    expect(parts).toContain('tool-deploy:output-denied');
    expect(parts).toContain('reasoning:done');
  });

  it('live text streams as text deltas inside its step, a discarded attempt resets the step, tool progress is transient', async () => {
    seq = 0;
    const m = new UIChunkMapper({ kind: 'next' }, { knownLastSeq: 0 });
    const chunks: UIChunk[] = [...m.committed(rec('run/start', { runId: 'r', kind: 'prompt' }, 0)).chunks];
    chunks.push(...m.committed(rec('user/message', { message: { role: 'user', content: 'hi' } }, 0)).chunks);
    const live1 = [
      ...m.live({ type: 'message_start', role: 'assistant' }),
      ...m.live({ type: 'message_delta', role: 'assistant', text: 'half' }),
      ...m.live({ type: 'message_end', role: 'assistant', message: { role: 'assistant', content: '' }, discarded: { reason: 'retry' } }),
    ];
    expect(live1).toEqual([
      { type: 'start-step' },
      { type: 'text-start', id: 'live1' },
      { type: 'text-delta', id: 'live1', delta: 'half' },
      { type: 'text-end', id: 'live1' },
      { type: 'reset-step' },
    ]);
    expect(m.committed(rec('step/start', {})).chunks).toEqual([]); // its start-step went out with the live text
    const live2 = [
      ...m.live({ type: 'message_start', role: 'assistant' }),
      ...m.live({ type: 'message_delta', role: 'assistant', text: 'Hello' }),
    ];
    expect(live2).toEqual([
      { type: 'text-start', id: 'live2' },
      { type: 'text-delta', id: 'live2', delta: 'Hello' },
    ]);
    const committed = m.committed(rec('assistant/message', { message: { role: 'assistant', content: 'Hello' } })).chunks;
    expect(committed).toEqual([{ type: 'text-end', id: 'live2' }]); // the committed message closes the streamed text, no repeat
    const progress = m.live({ type: 'tool_update', callId: 'c', name: 'deploy', update: { phase: 'push' } });
    expect(progress).toEqual([
      { type: 'data-actorloop-tool-progress', id: 'c', data: { callId: 'c', name: 'deploy', update: { phase: 'push' } }, transient: true },
    ]);
    const built = await throughAiSdk([...chunks, ...live1, ...live2, ...committed, ...progress]);
    expect(built!.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text)).toEqual(['Hello']);
  });

  it('a suspension ends the reply only at the log end the stream found; the next user message ends it too', () => {
    seq = 0;
    const records = [
      rec('run/start', { runId: 'r', kind: 'prompt', inputId: 'r' }, 0),
      rec('user/message', { message: { role: 'user', content: 'a' } }, 0),
      rec('run/end', { runId: 'r', status: 'suspended' }),
      rec('run/start', { runId: 'r', kind: 'respond' }),
      rec('run/end', { runId: 'r', status: 'fenced' }),
      rec('run/start', { runId: 'r2', kind: 'prompt', inputId: 'm2' }),
      rec('user/message', { message: { role: 'user', content: 'b' } }),
    ];
    const replay = new UIChunkMapper({ kind: 'next' }, { knownLastSeq: 5 });
    expect(records.map((r) => replay.committed(r).end ?? false)).toEqual([false, false, false, false, false, false, true]);
    const live = new UIChunkMapper({ kind: 'next' }, { knownLastSeq: 2 });
    expect(records.slice(0, 3).map((r) => live.committed(r).end ?? false)).toEqual([false, false, true]);
    const history = uiMessagesOf(records);
    expect(history.map((h) => h.id)).toEqual(['r', 'r-reply', 'm2', 'm2-reply']);
  });

  it("a steer (a user message inside the run, after its first) is a steering-message part of the run's reply, which goes on to the run's end", async () => {
    seq = 0;
    const records = [
      rec('run/start', { runId: 'r', kind: 'prompt', inputId: 'r' }, 0),
      rec('user/message', { message: { role: 'user', content: 'a' } }, 0),
      rec('step/start', {}),
      rec('step/end', {}),
      rec('input/accepted', { inputId: 'steer1', mode: 'steer', messages: [{ role: 'user', content: 'b' }] }),
      rec('user/message', { message: { role: 'user', content: 'b' }, inputId: 'steer1' }),
      rec('step/start', {}, 2),
      rec('assistant/message', { message: { role: 'assistant', content: 'ok, b' } }, 2),
      rec('step/end', {}, 2),
      rec('run/end', { runId: 'r', status: 'succeeded' }, 2),
    ];
    const m = new UIChunkMapper({ kind: 'input', inputId: 'r' }, { knownLastSeq: 10 });
    const mapped = records.map((r) => m.committed(r));
    expect(mapped[5]!.chunks).toEqual([{ type: 'steering-message', id: 'steer1', parts: [{ type: 'text', text: 'b' }] }]);
    expect(mapped.map((x) => x.end ?? false)).toEqual([...Array(9).fill(false), true]);
    const built = await throughAiSdk(mapped.flatMap((x) => x.chunks));
    const history = uiMessagesOf(records);
    expect(history.map((h) => h.id)).toEqual(['r', 'r-reply']);
    expect(plain(history[1])).toEqual(plain(built));
    expect(built!.parts.map((p) => p.type)).toEqual(['data-actorloop-run', 'step-start', 'steering-message', 'step-start', 'text']);
  });

  it("only an input's message inside the run is a steer: a prompt's further messages are the user's message, a tool's added message is not shown", async () => {
    seq = 0;
    const records = [
      rec('run/start', { runId: 'r', kind: 'prompt', inputId: 'r' }, 0),
      rec('user/message', { message: { role: 'user', content: 'first part' } }, 0),
      rec('user/message', { message: { role: 'user', content: 'second part' } }, 0),
      rec('step/start', {}),
      rec('tool/result', { callId: 'c1', name: 'snap', outcome: { kind: 'completed', content: 'took it' } }),
      rec('user/message', { message: { role: 'user', content: 'a picture the tool added' } }),
      rec('step/end', {}),
      rec('step/start', {}, 2),
      rec('assistant/message', { message: { role: 'assistant', content: 'done' } }, 2),
      rec('step/end', {}, 2),
      rec('run/end', { runId: 'r', status: 'succeeded' }, 2),
    ];
    const m = new UIChunkMapper({ kind: 'input', inputId: 'r' }, { knownLastSeq: records.length });
    const mapped = records.map((r) => m.committed(r));
    const chunks = mapped.flatMap((x) => x.chunks);
    expect(chunks.filter((c) => c.type === 'steering-message')).toEqual([]);
    expect(mapped.map((x) => x.end ?? false)).toEqual([...Array(records.length - 1).fill(false), true]);
    const built = await throughAiSdk(chunks);
    const history = uiMessagesOf(records);
    expect(history.map((h) => h.id)).toEqual(['r', 'r-reply']);
    expect(history[0]!.parts).toEqual([
      { type: 'text', text: 'first part' },
      { type: 'text', text: 'second part' },
    ]);
    expect(plain(history[1])).toEqual(plain(built));
  });

  it("a failed run's error message reaches the UI: an error chunk before the finish, and the run part (stream and history alike) carries it", () => {
    seq = 0;
    const records = [
      rec('run/start', { runId: 'r', kind: 'prompt', inputId: 'r' }, 0),
      rec('user/message', { message: { role: 'user', content: 'a' } }, 0),
      rec('step/start', {}),
      rec('run/end', { runId: 'r', status: 'failed', error: { message: 'upstream 500 exploded', code: 'execution' } }),
    ];
    const m = new UIChunkMapper({ kind: 'input', inputId: 'r' }, { knownLastSeq: 4 });
    const out = records.map((r) => m.committed(r)).at(-1)!;
    expect(out.chunks).toEqual([
      { type: 'data-actorloop-run', id: 'r', data: { runId: 'r', kind: 'prompt', status: 'failed', error: 'upstream 500 exploded' } },
      { type: 'error', errorText: 'upstream 500 exploded' },
      { type: 'finish', finishReason: 'error' },
    ]);
    const history = uiMessagesOf(records);
    expect(history[1]!.parts.find((p) => p.type === 'data-actorloop-run')).toEqual(out.chunks[0]);
  });

  it('a rejected call shows its arguments as the input, parsed when they are JSON, in the stream and the history alike (no deprecated rawInput)', async () => {
    seq = 0;
    const toolCalls = [
      { id: 'e1', name: 'echo', arguments: '{"y":1}' },
      { id: 'e2', name: 'nope', arguments: 'not json' },
    ];
    const records = [
      rec('run/start', { runId: 'r', kind: 'prompt', inputId: 'r' }, 0),
      rec('user/message', { message: { role: 'user', content: 'a' } }, 0),
      rec('step/start', {}),
      rec('assistant/message', { message: { role: 'assistant', content: '', toolCalls } }),
      rec('tool/batch-rejected', {
        issues: [
          { callId: 'e1', name: 'echo', message: 'x: expected string' },
          { callId: 'e2', name: 'nope', message: 'unknown tool' },
        ],
      }),
    ];
    const m = new UIChunkMapper({ kind: 'input', inputId: 'r' }, { knownLastSeq: 1_000 });
    const chunks = records.flatMap((r) => m.committed(r).chunks);
    expect(chunks.filter((c) => c.type === 'tool-input-error')).toEqual([
      { type: 'tool-input-error', toolCallId: 'e1', toolName: 'echo', input: { y: 1 }, errorText: 'x: expected string' },
      { type: 'tool-input-error', toolCallId: 'e2', toolName: 'nope', input: 'not json', errorText: 'unknown tool' },
    ]);
    const built = await throughAiSdk(chunks);
    const history = uiMessagesOf(records);
    expect(plain(history[1])).toEqual(plain(built));
    expect(history[1]!.parts.find((p) => 'toolCallId' in p && p.toolCallId === 'e1')).toEqual({
      type: 'tool-echo',
      toolCallId: 'e1',
      state: 'output-error',
      input: { y: 1 },
      errorText: 'x: expected string',
    });
  });

  it("a streamed message's reasoning comes before its text, as in the history: the commit replaces the streamed text with the message's parts in order", async () => {
    seq = 0;
    const thinking = {
      anthropic: {
        content: [
          { type: 'thinking', thinking: 'hmm', signature: 's' },
          { type: 'text', text: 'Hello' },
        ],
      },
    };
    const records = [
      rec('run/start', { runId: 'r', kind: 'prompt', inputId: 'r' }, 0),
      rec('user/message', { message: { role: 'user', content: 'a' } }, 0),
      rec('step/start', {}),
      rec('assistant/message', { message: { role: 'assistant', content: 'Hello', providerData: thinking } }),
      rec('step/end', {}),
      rec('run/end', { runId: 'r', status: 'succeeded' }),
    ];
    const m = new UIChunkMapper({ kind: 'input', inputId: 'r' }, { knownLastSeq: 1_000 });
    const chunks = records.slice(0, 2).flatMap((r) => m.committed(r).chunks);
    chunks.push(
      ...m.live({ type: 'message_start', role: 'assistant' }),
      ...m.live({ type: 'message_delta', role: 'assistant', text: 'Hel' }),
    );
    chunks.push(...records.slice(2).flatMap((r) => m.committed(r).chunks));
    const built = await throughAiSdk(chunks);
    const history = uiMessagesOf(records);
    expect(plain(built)).toEqual(plain(history[1]));
    expect(built!.parts.map((p) => p.type)).toEqual(['data-actorloop-run', 'step-start', 'reasoning', 'text']);
  });

  it('UIMessageBuilder keeps a data part once per id (the newest data), as the AI SDK does', () => {
    const b = new UIMessageBuilder();
    b.apply({ type: 'start', messageId: 'm' });
    b.apply({ type: 'data-actorloop-run', id: 'r', data: { runId: 'r', status: 'running' } });
    b.apply({ type: 'data-actorloop-run', id: 'r', data: { runId: 'r', status: 'succeeded' } });
    expect(b.message!.parts).toEqual([{ type: 'data-actorloop-run', id: 'r', data: { runId: 'r', status: 'succeeded' } }]);
  });
});
