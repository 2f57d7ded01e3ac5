import { z } from 'zod';
import { ClockOption } from '../contracts/clock.js';
import type { DeliveryErrorInfo } from '../contracts/requests.js';
import type { Envelope } from './envelopes.js';

/**
 * Receives a session's envelopes (DESIGN §6 `subscribe`).
 *
 * Contract: called asynchronously (never inside `publish`), one envelope at a time, in `seq`
 * order. It may return a promise; the next envelope waits for it, at most `deliveryTimeoutMs`
 * (the timeout only bounds a returned promise: a synchronous listener blocks the event loop like
 * any other code). A throw or a rejection is a delivery error (`'error'`). It may call the
 * unsubscribe function, `publish` or `subscribe` from inside.
 * @example
 * const listener: SubscriberListener = async (env) => { await ui.render(env.event) }
 */
export type SubscriberListener = (envelope: Envelope) => void | PromiseLike<void>;

/**
 * Stops deliveries to one subscriber; safe to call any time, more than once, or from inside its
 * own listener. Nothing is reported for a delivery it interrupts.
 * @example
 * const off = hub.subscribe(log); off()
 */
export type Unsubscribe = () => void;

/**
 * `subscribe` options (DESIGN §6). Unknown keys are rejected, so that a typo is not a silent
 * default.
 * @example
 * hub.subscribe(audit, { required: true, name: 'audit', capacity: 64, deliveryTimeoutMs: 5000 })
 */
export const SubscribeOptions = z.strictObject({
  /** A required subscriber gets every envelope: the producer waits for room in its queue. */
  required: z.boolean().default(false),
  /** `consumer` in its delivery errors; `subscriber-<n>` when omitted. */
  name: z.string().min(1).optional(),
  /** Envelopes waiting for the listener, besides the one being delivered. */
  capacity: z.number().int().positive().default(256),
  deliveryTimeoutMs: z.number().int().positive().max(2_147_483_647).default(1000),
});
export type SubscribeOptions = z.input<typeof SubscribeOptions>;

/**
 * `new SubscriberHub(options)`: `maxErrors` bounds the delivery errors kept until `takeErrors`
 * collects them (beyond it the oldest are dropped and counted in `droppedErrors`); `clock` times
 * every delivery (`deliveryTimeoutMs`): a session's hub runs on the runtime's clock.
 * @example
 * const hub = new SubscriberHub({ maxErrors: 100, clock: new SimulatedClock() })
 */
export const SubscriberHubOptions = z.strictObject({
  maxErrors: z.number().int().positive().default(1000),
  clock: ClockOption,
});
export type SubscriberHubOptions = z.input<typeof SubscriberHubOptions>;

/**
 * A failed delivery, DESIGN's `DeliveryError { consumer, seq, reason }`: data (a listener is the
 * outside world), not a thrown error. It is a `DeliveryErrorInfo` (so it fits
 * `ExecutionResult.deliveryErrors`) tagged with the envelope's `runId` and `attemptId`. `seq` is
 * the envelope that failed: for `'closed'`, the first one that did not fit the queue.
 * @example
 * const errors: DeliveryError[] = hub.takeErrors({ runId: 'r1', attemptId: 'a1' })
 */
export type DeliveryError = DeliveryErrorInfo & { runId: string; attemptId: string };
