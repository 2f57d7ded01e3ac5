import { describe, expect, it } from 'vitest';
import { EventRecord, SCHEMA_VERSION } from '../../src/contracts/events.js';
import { decodeRecord, encodeRecord } from '../../src/persistence/codec.js';

const record: EventRecord = {
  sessionId: 'sess "quoted" \\ ü',
  seq: 7,
  turn: 2,
  step: 3,
  attempt: 1,
  writerEpoch: 4,
  eventId: 'ev-1',
  type: 'tool/result',
  surfaceOp: 'append',
  payload: {
    callId: 'c1',
    name: 'echo',
    outcome: { kind: 'completed', content: 'line\nbreak "q"', isError: false, concludesTurn: false, releaseResources: [] },
    startedAt: 1,
    endedAt: 2,
  },
  occurredAt: '2026-11-29T00:00:00.000Z',
  schemaVersion: SCHEMA_VERSION,
};

describe('encodeRecord (the hand-built record text)', () => {
  it('writes every field of the EventRecord schema, and only those', () => {
    const fields = Object.keys(EventRecord.shape).sort();
    expect(Object.keys(JSON.parse(encodeRecord(record))).sort()).toEqual(fields);
  });

  it('decodes to the same record as JSON.stringify would, with or without the payload text given', () => {
    expect(JSON.parse(encodeRecord(record))).toEqual(JSON.parse(JSON.stringify(record)));
    expect(decodeRecord(record.sessionId, 7, encodeRecord(record, JSON.stringify(record.payload)))).toEqual(record);
  });
});

describe('decodeRecord and the id rule', () => {
  const toolCall = (payload: Record<string, unknown>) => JSON.stringify({ ...record, type: 'tool/call', surfaceOp: 'append', payload });
  const call = { callId: 'c1', name: 'lock', arguments: {}, mode: 'exclusive', resources: ['room'], idempotencyKey: 's/r/1/c1' };

  it('a record logged before the id rule (an empty resource key, a lone surrogate or NUL in an id) is read as it was written', () => {
    for (const payload of [
      { ...call, resources: [''] },
      { ...call, callId: 'a\ud800' },
      { ...call, idempotencyKey: 'k\u0000' },
    ]) {
      const r = decodeRecord(record.sessionId, 7, toolCall(payload));
      expect(r.payload, JSON.stringify(payload)).toEqual(payload);
    }
    expect(decodeRecord(record.sessionId, 7, JSON.stringify({ ...record, eventId: 'e\u0000' })).eventId).toBe('e\u0000');
  });

  it('a payload that breaks its schema otherwise is still a CorruptLogError', () => {
    expect(() => decodeRecord(record.sessionId, 7, toolCall({ ...call, resources: 'room' }))).toThrow(
      /tool\/call payload fails its schema/,
    );
    expect(() => decodeRecord(record.sessionId, 7, toolCall({ ...call, resources: [''], mode: 'sometimes' }))).toThrow(
      /payload fails its schema/,
    );
  });
});
