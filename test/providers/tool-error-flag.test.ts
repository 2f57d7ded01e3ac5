import { describe, expect, it } from 'vitest';
import { toAnthropicMessages } from '../../src/providers/anthropic-messages.js';
import { toOpenAIMessages } from '../../src/providers/openai.js';
import { surfaceMessages } from '../../src/persistence/surface.js';
import type { EventRecord } from '../../src/contracts/events.js';
import type { ModelMessage } from '../../src/contracts/message.js';

const result = (outcome: unknown): EventRecord => ({
  sessionId: 's',
  seq: 3,
  turn: 1,
  step: 1,
  attempt: 1,
  writerEpoch: 1,
  eventId: 'e',
  type: 'tool/result',
  surfaceOp: 'append',
  payload: { callId: 'c1', name: 'pay', outcome },
  occurredAt: '',
  schemaVersion: '1',
});

describe('error tool results are flagged for the model', () => {
  it('marks error outcomes isError on the surface and sends is_error to Anthropic', () => {
    const [failed] = surfaceMessages(
      result({ kind: 'completed', content: 'card declined', isError: true, concludesTurn: false, releaseResources: [] }),
    );
    const [ok] = surfaceMessages(
      result({ kind: 'completed', content: 'paid', isError: false, concludesTurn: false, releaseResources: [] }),
    );
    const [hanging] = surfaceMessages(result({ kind: 'uncertain-hanging', content: 'unknown', resourceLocks: [] }));
    expect(failed).toMatchObject({ role: 'tool', isError: true });
    expect(ok!.isError).toBeUndefined();
    expect(hanging!.isError).toBe(true);
    const call = { role: 'assistant' as const, content: '', toolCalls: [{ id: 'c1', name: 'pay', arguments: '{}' }] };
    const { messages } = toAnthropicMessages([{ role: 'user', content: 'pay' }, call, failed! as ModelMessage]);
    expect(messages.at(-1)!.content).toEqual([expect.objectContaining({ type: 'tool_result', tool_use_id: 'c1', is_error: true })]);
    const openai = toOpenAIMessages([{ role: 'user', content: 'pay' }, call, failed! as ModelMessage]);
    expect(openai.at(-1)).toEqual({ role: 'tool', tool_call_id: 'c1', content: 'Error: card declined' });
  });
});
