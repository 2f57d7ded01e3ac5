import { describe, expect, it } from 'vitest';
import { causeInfo } from '../../src/actors/end-run.js';
import {
  CancelledError,
  isCancelledError,
  isOutputValidationError,
  isSessionHeldError,
  isValidationError,
  OutputValidationError,
  SessionHeldError,
  ValidationError,
} from '../../src/index.js';

// The is*Error guards (src/contracts/error-base.ts hasCode): a thrown error of the kind (any copy
// of the package), or a result's cause as the log recorded it (causeInfo, read back as JSON).

const readBack = (e: unknown) => JSON.parse(JSON.stringify(causeInfo(e))) as unknown;

describe('the is*Error guards', () => {
  it('take a cause read back from the log, its JSON fields kept: lists, plain objects, strings redacted', () => {
    const output = readBack(new OutputValidationError(2, ['total: expected number']));
    expect(isOutputValidationError(output)).toBe(true);
    expect(output).toMatchObject({
      name: 'OutputValidationError',
      code: 'output_validation',
      corrections: 2,
      issues: ['total: expected number'],
    });
    const invalid = readBack(new ValidationError('session.run', [{ path: ['message', 'role'], message: 'must be user' }]));
    expect(isValidationError(invalid)).toBe(true);
    expect(invalid).toMatchObject({ issues: [{ path: ['message', 'role'], message: 'must be user' }] });
    const held = readBack(new SessionHeldError('s1', { host: 'h', pid: 7 }));
    expect(isSessionHeldError(held)).toBe(true);
    expect(held).toMatchObject({ sessionId: 's1', holder: { host: 'h', pid: 7 } });
  });

  it("refuse a plain object with the code alone, or another kind's name: one a user's code throws is not taken for the runtime's", () => {
    expect(isCancelledError(new CancelledError())).toBe(true);
    expect(isCancelledError({ code: 'cancelled', message: 'stop' })).toBe(false);
    expect(isCancelledError({ code: 'cancelled', name: 'AbortError', message: 'stop' })).toBe(false);
    expect(
      isCancelledError(
        Object.assign(Object.create({ kind: 'mine' }) as object, { code: 'cancelled', name: 'CancelledError', message: 'x' }),
      ),
    ).toBe(false);
    // an Error of that code from anywhere (another copy of the package) is one, as before
    expect(isCancelledError(Object.assign(new Error('x'), { code: 'cancelled' }))).toBe(true);
  });
});
