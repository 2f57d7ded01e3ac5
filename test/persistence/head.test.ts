import { describe, expect, it } from 'vitest';
import { isCurrentHead, newHead, SessionHead } from '../../src/persistence/head.js';

/** The head's hand-written check (read on every append) agrees with its schema. */
describe('isCurrentHead', () => {
  const full: SessionHead = {
    ...newHead('s'),
    writerEpoch: 2,
    lastSeq: 9,
    openRun: { runId: 'r2', turn: 2, startSeq: 8 },
    lastSettledRun: { runId: 'r1', turn: 1, startSeq: 2, endSeq: 7 },
    pendingInputs: [{ inputId: 'i1', seq: 9, mode: 'steer' }],
    heldLocks: ['db'],
    stateContextSeq: 5,
  };

  it('takes a head with every field of the schema, as the schema does', () => {
    expect(isCurrentHead(full)).toBe(true);
    expect(isCurrentHead(newHead('s'))).toBe(true);
    expect(SessionHead.parse(full)).toEqual(full);
  });

  it('refuses a head missing any one field of the schema (it is read through the schema, which fills defaults)', () => {
    for (const key of Object.keys(SessionHead.shape)) {
      const h: Record<string, unknown> = { ...full };
      delete h[key];
      expect(isCurrentHead(h), key).toBe(false);
    }
  });

  it('refuses what the schema refuses: a seq of 0, a negative count, a bad input mode', () => {
    expect(isCurrentHead({ ...full, surfaceStartSeq: 0 })).toBe(false);
    expect(isCurrentHead({ ...full, openRun: { runId: 'r', turn: 1, startSeq: 0 } })).toBe(false);
    expect(isCurrentHead({ ...full, lastSeq: -1 })).toBe(false);
    expect(isCurrentHead({ ...full, pendingInputs: [{ inputId: 'i', seq: 0, mode: 'steer' }] })).toBe(false);
    expect(isCurrentHead({ ...full, pendingInputs: [{ inputId: 'i', seq: 3, mode: 'later' }] })).toBe(false);
    expect(isCurrentHead({ ...full, heldLocks: [1] })).toBe(false);
    for (const bad of [
      { ...full, surfaceStartSeq: 0 },
      { ...full, lastSeq: -1 },
    ])
      expect(SessionHead.safeParse(bad).success).toBe(false);
  });
});
