import type { Envelope } from '../../src/index.js';
import { deferred } from './drafts.js';

// Helpers of the SubscriberHub tests (test/streams/subscribers.test.ts, required-subscribers.test.ts).

export const env = (seq: number, runId = 'r1', attemptId = 'a1'): Envelope => ({
  runId,
  attemptId,
  seq,
  event: { type: 'step_start', step: seq },
});

/** Lets queued microtasks and promise callbacks run (setImmediate is never faked here). */
export const settle = () => new Promise<void>((r) => setImmediate(r));

/** Tracks whether a promise has settled, without awaiting it. */
export function track(p: Promise<void>) {
  const t = { done: false };
  void p.then(() => (t.done = true));
  return t;
}

/** A listener whose deliveries finish only when the test says so. */
export function gatedListener() {
  const seen: number[] = [];
  const gates: Array<ReturnType<typeof deferred<void>>> = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const listener = (e: Envelope) => {
    seen.push(e.seq);
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const d = deferred<void>();
    gates.push(d);
    return d.promise.finally(() => inFlight--);
  };
  return { listener, seen, gates, maxInFlight: () => maxInFlight };
}
