import { expect } from 'vitest';
import { ValidationError } from '../../src/index.js';

/** Expects a ValidationError (the class, not a TypeError or a raw Error) whose message names `field`. */
export async function expectValidation(p: Promise<unknown> | (() => unknown), field: string): Promise<void> {
  let caught: unknown;
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    caught = e;
  }
  expect(caught, `expected a ValidationError naming ${field}`).toBeInstanceOf(ValidationError);
  expect(String((caught as Error).message)).toContain(field);
}
