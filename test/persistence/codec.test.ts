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
