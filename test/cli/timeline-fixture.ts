import { SURFACE_OPS, type EventRecord, type EventType } from '../../src/contracts/events.js';

/**
 * Builds a hand-made session log with exact times, shaped like the engine's (same event types,
 * payloads, turn/step/attempt numbering; the tests validate it against the schemas).
 */
export class LogBuilder {
  readonly events: EventRecord[] = [];
  private epoch = 0;
  constructor(
    readonly sessionId: string,
    private readonly base = Date.parse('2026-01-05T10:00:00.000Z'),
  ) {}

  t(offsetMs: number): number {
    return this.base + offsetMs;
  }

  add(
    offsetMs: number,
    type: EventType,
    payload: Record<string, unknown>,
    at: { turn?: number; step?: number; attempt?: number } = {},
  ): EventRecord {
    if (type === 'session/attached') this.epoch++;
    const e: EventRecord = {
      sessionId: this.sessionId,
      seq: this.events.length + 1,
      turn: at.turn ?? 0,
      step: at.step ?? 0,
      attempt: at.attempt ?? 0,
      writerEpoch: this.epoch,
      eventId: `ev-${this.events.length + 1}`,
      type,
      surfaceOp: SURFACE_OPS[type],
      payload,
      occurredAt: new Date(this.base + offsetMs).toISOString(),
      schemaVersion: '1',
    };
    this.events.push(e);
    return e;
  }
}

const usage = { inputTokens: 100, outputTokens: 20 };
const call = (id: string, name: string, args: unknown) => ({ id, name, arguments: JSON.stringify(args) });

/**
 * Three runs across two processes:
 * - run r1 (turn 1): step 1 runs two parallel tools (one completes, one errors), step 2 an
 *   exclusive deploy that ends uncertain-hanging, step 3 the final answer, delivered.
 * - run r2 (turn 2): suspends for approval; an hour later a new process (writer epoch 2)
 *   responds: the approved call is cancelled; a compaction; a final whose delivery is unknown.
 * - run r3 (turn 3): its process stopped while an exclusive tool ran (no result, no run/end).
 * Expected drawing: 3 runs, 4 attempts, 7 steps, 5 tool calls (2 uncertain, 1 cancelled).
 */
export function fixtureSession(sessionId = 'fixture'): EventRecord[] {
  const b = new LogBuilder(sessionId);
  const r1 = { turn: 1, attempt: 1 };
  b.add(0, 'session/attached', { sessionInstanceId: 'inst-1', writerEpoch: 1 });
  b.add(10, 'run/start', { runId: 'r1', attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f'.repeat(64) }, r1);
  b.add(10, 'user/message', { message: { role: 'user', content: 'Check and deploy <release> & report' } }, r1);
  const s1 = { ...r1, step: 1 };
  b.add(400, 'step/start', {}, s1);
  b.add(
    400,
    'assistant/message',
    {
      message: {
        role: 'assistant',
        content: '',
        toolCalls: [call('c1', 'calculate', { expression: '6*7' }), call('c2', 'read_file', { path: 'x' })],
      },
      usage,
      finishReason: 'tool_calls',
      latencyMs: 380,
    },
    s1,
  );
  b.add(
    400,
    'tool/call',
    {
      callId: 'c1',
      name: 'calculate',
      arguments: { expression: '6*7' },
      mode: 'parallel',
      resources: [],
      idempotencyKey: `${sessionId}/r1/c1`,
    },
    s1,
  );
  b.add(
    400,
    'tool/call',
    { callId: 'c2', name: 'read_file', arguments: { path: 'x' }, mode: 'parallel', resources: [], idempotencyKey: `${sessionId}/r1/c2` },
    s1,
  );
  b.add(
    900,
    'tool/result',
    {
      callId: 'c1',
      name: 'calculate',
      outcome: { kind: 'completed', content: '42', isError: false, concludesTurn: false, releaseResources: [] },
      startedAt: b.t(405),
      endedAt: b.t(650),
    },
    s1,
  );
  b.add(
    900,
    'tool/result',
    {
      callId: 'c2',
      name: 'read_file',
      outcome: { kind: 'completed', content: 'x: no such file', isError: true, concludesTurn: false, releaseResources: [] },
      startedAt: b.t(405),
      endedAt: b.t(880),
    },
    s1,
  );
  b.add(900, 'step/end', { usage }, s1);
  const s2 = { ...r1, step: 2 };
  b.add(1300, 'step/start', {}, s2);
  b.add(
    1300,
    'assistant/message',
    {
      message: { role: 'assistant', content: 'Deploying.', toolCalls: [call('d1', 'deploy', { env: 'staging' })] },
      usage,
      finishReason: 'tool_calls',
      latencyMs: 390,
    },
    s2,
  );
  b.add(
    1300,
    'tool/call',
    {
      callId: 'd1',
      name: 'deploy',
      arguments: { env: 'staging' },
      mode: 'exclusive',
      resources: ['env:staging'],
      idempotencyKey: `${sessionId}/r1/d1`,
    },
    s2,
  );
  b.add(
    3000,
    'tool/result',
    {
      callId: 'd1',
      name: 'deploy',
      outcome: { kind: 'uncertain-hanging', content: 'did not stop within 2000 ms', resourceLocks: ['env:staging'] },
      startedAt: b.t(1305),
      endedAt: b.t(2990),
    },
    s2,
  );
  b.add(3000, 'step/end', { usage }, s2);
  const s3 = { ...r1, step: 3 };
  b.add(3500, 'step/start', {}, s3);
  b.add(
    3500,
    'assistant/message',
    { message: { role: 'assistant', content: 'The deploy is uncertain </script><b>x</b>' }, usage, finishReason: 'stop', latencyMs: 480 },
    s3,
  );
  b.add(3500, 'final/message', { finalMessageId: 'r1/final/1.3', runId: 'r1', content: 'The deploy is uncertain' }, s3);
  b.add(3500, 'step/end', { usage }, s3);
  b.add(3510, 'delivery/committed', { finalMessageId: 'r1/final/1.3' }, s3);
  b.add(3510, 'run/end', { runId: 'r1', attemptId: 'a1', status: 'succeeded', outcome: 'completed', usage }, s3);

  const r2 = { turn: 2, attempt: 1 };
  b.add(5000, 'run/start', { runId: 'r2', attemptId: 'b1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f'.repeat(64) }, r2);
  b.add(5000, 'user/message', { message: { role: 'user', content: 'Pay ACME' } }, r2);
  const pending = { kind: 'approval', questionId: 'approval-p1', calls: [{ callId: 'p1', name: 'pay', arguments: { amount: 5 } }] };
  b.add(5400, 'step/start', {}, { ...r2, step: 1 });
  b.add(
    5400,
    'assistant/message',
    {
      message: { role: 'assistant', content: '', toolCalls: [call('p1', 'pay', { amount: 5 })] },
      usage,
      finishReason: 'tool_calls',
      latencyMs: 390,
    },
    { ...r2, step: 1 },
  );
  b.add(5400, 'approval/requested', { pendingRequest: pending }, { ...r2, step: 1 });
  b.add(5400, 'run/suspended', { pendingRequest: pending }, { ...r2, step: 1 });
  b.add(5405, 'run/end', { runId: 'r2', attemptId: 'b1', status: 'suspended', outcome: 'suspended', usage }, { ...r2, step: 1 });
  const hour = 3_600_000;
  const r2b = { turn: 2, attempt: 2 };
  b.add(hour + 5000, 'session/attached', { sessionInstanceId: 'inst-2', writerEpoch: 2 });
  b.add(
    hour + 5010,
    'run/start',
    { runId: 'r2', attemptId: 'b2', runEpoch: 2, kind: 'respond', executionProfileFingerprint: 'f'.repeat(64) },
    { ...r2b, step: 1 },
  );
  b.add(hour + 5010, 'approval/decided', { questionId: 'approval-p1', decisions: { p1: 'approve' }, timedOut: false }, { ...r2b, step: 1 });
  b.add(
    hour + 5010,
    'tool/call',
    { callId: 'p1', name: 'pay', arguments: { amount: 5 }, mode: 'exclusive', resources: ['ledger'], idempotencyKey: `${sessionId}/r2/p1` },
    { ...r2b, step: 1 },
  );
  b.add(
    hour + 6000,
    'tool/result',
    {
      callId: 'p1',
      name: 'pay',
      outcome: { kind: 'cancelled', settled: true, partialContent: 'cancelled: requestCancel', resourceLocks: [] },
      startedAt: b.t(hour + 5015),
      endedAt: b.t(hour + 5990),
    },
    { ...r2b, step: 1 },
  );
  b.add(hour + 6000, 'step/end', {}, { ...r2b, step: 1 });
  b.add(
    hour + 6100,
    'compaction',
    { summary: { role: 'user', content: 'Earlier: a deploy and a payment.' }, replacedThroughSeq: 20 },
    { ...r2b, step: 2 },
  );
  b.add(hour + 6600, 'step/start', {}, { ...r2b, step: 2 });
  b.add(
    hour + 6600,
    'assistant/message',
    { message: { role: 'assistant', content: 'Payment cancelled.' }, usage, finishReason: 'stop', latencyMs: 480 },
    { ...r2b, step: 2 },
  );
  b.add(hour + 6600, 'final/message', { finalMessageId: 'r2/final/2.2', runId: 'r2', content: 'Payment cancelled.' }, { ...r2b, step: 2 });
  b.add(hour + 6600, 'step/end', { usage }, { ...r2b, step: 2 });
  b.add(
    hour + 6610,
    'delivery/unknown',
    { finalMessageId: 'r2/final/2.2', reason: 'the delivery owner threw: offline' },
    { ...r2b, step: 2 },
  );
  b.add(
    hour + 6610,
    'run/end',
    { runId: 'r2', attemptId: 'b2', status: 'delivery_unknown', outcome: 'failed', usage },
    { ...r2b, step: 2 },
  );

  const r3 = { turn: 3, attempt: 1 };
  b.add(
    hour + 9000,
    'run/start',
    { runId: 'r3', attemptId: 'c1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f'.repeat(64) },
    r3,
  );
  b.add(hour + 9000, 'user/message', { message: { role: 'user', content: 'Migrate the database' } }, r3);
  b.add(hour + 9400, 'step/start', {}, { ...r3, step: 1 });
  b.add(
    hour + 9400,
    'assistant/message',
    {
      message: { role: 'assistant', content: '', toolCalls: [call('x1', 'migrate', {})] },
      usage,
      finishReason: 'tool_calls',
      latencyMs: 390,
    },
    { ...r3, step: 1 },
  );
  b.add(
    hour + 9400,
    'tool/call',
    { callId: 'x1', name: 'migrate', arguments: {}, mode: 'exclusive', resources: ['db'], idempotencyKey: `${sessionId}/r3/x1` },
    { ...r3, step: 1 },
  );
  return b.events;
}
