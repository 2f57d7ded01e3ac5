import { expect } from 'vitest';
import type { Envelope } from '../../src/index.js';

/** The streamed text deltas among `envs`, in order. */
export const deltas = (envs: Envelope[]) => envs.flatMap((e) => (e.event.type === 'message_delta' ? [e.event.text] : []));

/**
 * A first attempt that streamed `broken` and failed, then a retry that streamed `retried`: the
 * broken attempt's message_end says it is discarded (before the retry's message_start), and the
 * retry's message_end carries the whole logged message.
 */
export function expectDiscardedThenRetried(envelopes: Envelope[], broken: string[], retried: string[]): void {
  const starts = envelopes.flatMap((e, i) => (e.event.type === 'message_start' ? [i] : []));
  expect(starts).toHaveLength(2);
  expect(deltas(envelopes.slice(0, starts[1]))).toEqual(broken);
  const ends = envelopes.filter((e) => e.event.type === 'message_end').map((e) => e.event);
  expect(ends).toMatchObject([
    { message: { role: 'assistant', content: broken.join('') }, discarded: { reason: expect.stringContaining('model attempt 1 failed') } },
    { message: { role: 'assistant', content: retried.join('') } },
  ]);
  expect(ends[1]).not.toHaveProperty('discarded');
  expect(envelopes.findIndex((e) => e.event.type === 'message_end')).toBeLessThan(starts[1]!);
  expect(deltas(envelopes.slice(starts[1]))).toEqual(retried);
}
