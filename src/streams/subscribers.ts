import { Subject, Subscription, type Observable } from 'rxjs';
import { z } from 'zod';
import type { Clock } from '../contracts/clock.js';
import { StoreClosedError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import type { Envelope } from './envelopes.js';
import { Ring, deferred, isFull, isThenable, setRef, type Deferred } from './delivery-queue.js';
import {
  SubscribeOptions,
  SubscriberHubOptions,
  type DeliveryError,
  type SubscriberListener,
  type Unsubscribe,
} from './subscriber-types.js';

export { SubscribeOptions, SubscriberHubOptions } from './subscriber-types.js';
export type { DeliveryError, SubscriberListener, Unsubscribe } from './subscriber-types.js';

const RESOLVED: Promise<void> = Promise.resolve();
const Listener = z.custom<SubscriberListener>((v) => typeof v === 'function', 'listener must be a function');

interface Sub {
  readonly name: string;
  readonly listener: SubscriberListener;
  readonly required: boolean;
  readonly capacity: number;
  readonly timeoutMs: number;
  readonly queue: Ring<Envelope>;
  open: boolean;
  /** Queued for a pump, or a delivery in flight. */
  running: boolean;
  /** Id of the in-flight asynchronous delivery; 0 for none. */
  delivery: number;
  /** The envelope being delivered (its listener call or returned promise) and when its delivery started (the hub's clock). */
  current: Envelope | undefined;
  startedAt: number;
  /** The watchdog (see `arm`), a handle of the hub's clock; at most one per subscriber. */
  timer: unknown;
}

/**
 * Fans a session's envelopes out to its subscribers (DESIGN §6 "Subscribers"). Each subscriber
 * has its own bounded queue and gets its envelopes in order, one at a time.
 *
 * - Non-required: never slows the producer. Overflow → closed with `'closed'` (the `seq` that did
 *   not fit); a throw or rejection → `'error'`, closed; slower than `deliveryTimeoutMs` →
 *   `'timeout'`, closed.
 * - Required: `publish` waits until every required queue has room, so it gets every envelope. A
 *   required listener that throws or times out is reported (`'error'` / `'timeout'`) and stays
 *   subscribed: delivery goes on with the next envelope (a timed-out promise is abandoned, not
 *   awaited). Closing it would silently drop the rest of the stream for a consumer that asked
 *   for all of it; one bad envelope should not.
 * - Every delivery error is kept (up to `maxErrors`) for `takeErrors` and emitted on `errors$`.
 *
 * Memory: one queue of at most `capacity` + 1 envelope references per subscriber (`capacity`
 * waiting, plus the next one when none is being delivered; envelopes are shared, not copied). A
 * required queue can exceed that only through `offer`/`attach`, whose producer skipped
 * `whenWritable`.
 * @example
 * const hub = new SubscriberHub()
 * const off = hub.subscribe((env) => console.log(env.seq, env.event.type), { name: 'log' })
 * await hub.publish(envelope)
 * result.deliveryErrors = hub.takeErrors({ runId, attemptId })
 */
export class SubscriberHub {
  private readonly subs = new Set<Sub>();
  private readonly requiredSubs = new Set<Sub>();
  private readonly maxErrors: number;
  private readonly clock: Clock;
  private errors: DeliveryError[] = [];
  private readonly errorSubject = new Subject<DeliveryError>();
  private readonly sources = new Subscription();
  private ready: Sub[] = [];
  private named = 0;
  private deliveries = 0;
  private active = 0;
  private waiting = 0;
  private tail: Promise<void> = RESOLVED;
  private roomGate: Deferred | undefined;
  private idleGate: Deferred | undefined;
  private drainGate: Deferred | undefined;
  private closed = false;
  private dropped = 0;
  /** Every delivery error as it happens; completes on `close()`. */
  readonly errors$: Observable<DeliveryError> = this.errorSubject.asObservable();

  constructor(options: SubscriberHubOptions = {}) {
    const o = parseInput(SubscriberHubOptions, options, 'SubscriberHub');
    this.maxErrors = o.maxErrors;
    this.clock = o.clock;
  }

  /**
   * Adds a subscriber; it gets the envelopes published from now on.
   * @example
   * const off = hub.subscribe(async (env) => send(env), { required: true, name: 'audit' })
   */
  subscribe(listener: SubscriberListener, options: SubscribeOptions = {}): Unsubscribe {
    parseInput(Listener, listener, 'subscribe(listener)');
    const o = parseInput(SubscribeOptions, options, 'subscribe');
    if (this.closed) throw new StoreClosedError('subscriber hub');
    const s: Sub = {
      name: o.name ?? `subscriber-${++this.named}`,
      listener,
      required: o.required,
      capacity: o.capacity,
      timeoutMs: o.deliveryTimeoutMs,
      queue: new Ring<Envelope>(),
      open: true,
      running: false,
      delivery: 0,
      current: undefined,
      startedAt: 0,
      timer: undefined,
    };
    this.subs.add(s);
    if (s.required) this.requiredSubs.add(s);
    return () => this.remove(s);
  }

  /**
   * Hands `envelope` to every subscriber once every required queue has room. Resolves when it
   * has (at once, with no required subscriber or when they keep up); never rejects. Publishes
   * are taken in call order.
   *
   * Contract: await each call before the next, so that waiting envelopes stay with the producer
   * (one at a time). After `close()` it does nothing.
   * @example
   * for (const env of envelopes) await hub.publish(env)
   */
  publish(envelope: Envelope): Promise<void> {
    if (this.waiting === 0 && this.hasRoom()) {
      this.offer(envelope);
      return RESOLVED;
    }
    this.waiting++;
    this.tail = this.tail.then(async () => {
      while (!this.hasRoom()) await this.whenWritable();
      this.waiting--;
      this.offer(envelope);
    });
    return this.tail;
  }

  /**
   * Hands `envelope` to every subscriber now, without waiting: for synchronous sources. A full
   * non-required queue closes its subscriber; a full required queue takes it anyway, so a
   * producer using `offer` should `await whenWritable()` between envelopes.
   * @example
   * hub.offer(envelope); await hub.whenWritable()
   */
  offer(envelope: Envelope): void {
    if (this.closed) return;
    for (const s of this.subs) {
      if (!s.required && isFull(s)) {
        this.fail(s, envelope, 'closed', `queue of ${s.capacity} envelopes was full`);
        continue;
      }
      s.queue.push(envelope);
      if (!s.running) {
        s.running = true;
        this.active++;
        if (this.ready.push(s) === 1) queueMicrotask(this.flush);
      }
    }
  }

  /**
   * Offers every envelope of `source` (e.g. `EnvelopeStream.events$`) until `close()` or the
   * returned subscription is unsubscribed.
   * @example
   * hub.attach(stream.events$)
   */
  attach(source: Observable<Envelope>): Subscription {
    const sub = source.subscribe({ next: (env) => this.offer(env) });
    this.sources.add(sub);
    return sub;
  }

  /**
   * Resolves when every required queue has room (at once when it has).
   * @example
   * await hub.whenWritable()
   */
  whenWritable(): Promise<void> {
    if (this.hasRoom()) return RESOLVED;
    if (this.roomGate) return this.roomGate.promise;
    this.roomGate = deferred();
    for (const s of this.requiredSubs) setRef(s.timer, true); // a waiting producer: their timeouts keep the process up to free the room
    return this.roomGate.promise;
  }

  /**
   * Resolves when no subscriber has an envelope queued or in flight.
   * @example
   * await hub.whenIdle()
   */
  whenIdle(): Promise<void> {
    if (this.active === 0) return RESOLVED;
    this.idleGate ??= deferred();
    return this.idleGate.promise;
  }

  /**
   * Resolves when every envelope queued for a required subscriber has been handed to its
   * listener (a delivery may still be in flight, e.g. a listener awaiting the session's close):
   * what a producer that stops (a session closing) awaits before `close()`, so that required
   * subscribers get every envelope published before it. Each delivery is still bounded by
   * `deliveryTimeoutMs`.
   * @example
   * await hub.whenRequiredDrained(); hub.close()
   */
  whenRequiredDrained(): Promise<void> {
    if (!this.requiredQueued()) return RESOLVED;
    this.drainGate ??= deferred();
    for (const s of this.requiredSubs) setRef(s.timer, true); // a hung listener's timeout keeps the process up to finish the drain
    return this.drainGate.promise;
  }

  /**
   * Removes and returns the delivery errors kept so far: those of one attempt, or all of them (a
   * session's next result takes every one: its own, and those an earlier attempt's deliveries
   * still in flight found after that attempt's result was made).
   * @example
   * const deliveryErrors = hub.takeErrors({ runId: 'r1', attemptId: 'a1' })
   */
  takeErrors(attempt?: { runId: string; attemptId: string }): DeliveryError[] {
    if (!attempt) {
      const all = this.errors;
      this.errors = [];
      return all;
    }
    const taken: DeliveryError[] = [];
    const kept: DeliveryError[] = [];
    for (const e of this.errors) (e.runId === attempt.runId && e.attemptId === attempt.attemptId ? taken : kept).push(e);
    this.errors = kept;
    return taken;
  }

  /** Subscribers still open. */
  get size(): number {
    return this.subs.size;
  }

  /** Delivery errors dropped because more than `maxErrors` were waiting for `takeErrors`. */
  get droppedErrors(): number {
    return this.dropped;
  }

  /**
   * Drops every subscriber (no errors reported), detaches the sources, releases waiting
   * publishes and completes `errors$`. Errors not yet taken stay available.
   * @example
   * hub.close()
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.sources.unsubscribe();
    for (const s of this.subs) this.remove(s);
    this.checkRoom();
    this.errorSubject.complete();
  }

  private readonly flush = (): void => {
    const ready = this.ready;
    this.ready = [];
    for (const s of ready) this.pump(s);
  };

  private pump(s: Sub): void {
    while (s.open) {
      const env = s.queue.shift();
      if (env === undefined) break;
      s.current = env; // being delivered: no longer counted against `capacity`
      if (s.required) this.checkRoom();
      let r: unknown;
      try {
        r = s.listener(env);
      } catch (e) {
        s.current = undefined;
        this.fail(s, env, 'error', e);
        continue;
      }
      if (isThenable(r)) return this.await(s, env, r);
      s.current = undefined;
    }
    this.stop(s);
  }

  private await(s: Sub, env: Envelope, r: PromiseLike<unknown>): void {
    const id = ++this.deliveries;
    s.delivery = id;
    s.current = env;
    s.startedAt = this.clock.now();
    if (s.timer === undefined) this.arm(s, s.timeoutMs);
    try {
      r.then(
        () => this.settle(s, id),
        (e: unknown) => this.settle(s, id, 'error', e),
      );
    } catch (e) {
      this.settle(s, id, 'error', e);
    }
  }

  private settle(s: Sub, id: number, reason?: 'error' | 'timeout', cause?: unknown): void {
    if (s.delivery !== id) return;
    const env = s.current!;
    s.delivery = 0;
    s.current = undefined;
    if (reason) this.fail(s, env, reason, cause);
    this.pump(s);
  }

  /**
   * One lazy watchdog per subscriber instead of a timer per delivery: when it fires it times out
   * the delivery in flight if that one is old enough, or re-arms for the rest of its time.
   */
  private arm(s: Sub, ms: number): void {
    s.timer = this.clock.setTimeout(() => {
      s.timer = undefined;
      if (!s.open || s.delivery === 0) return;
      const left = s.startedAt + s.timeoutMs - this.clock.now();
      if (left > 0) this.arm(s, left);
      else this.settle(s, s.delivery, 'timeout', `no answer within ${s.timeoutMs} ms`);
    }, ms);
    if (!(s.required && (this.drainGate || this.roomGate))) setRef(s.timer, false); // unless a producer waits on it
  }

  private fail(s: Sub, env: Envelope, reason: DeliveryError['reason'], cause: unknown): void {
    if (!s.open) return;
    if (!s.required) this.remove(s);
    const message = cause instanceof Error ? cause.message : String(cause);
    const error: DeliveryError = { consumer: s.name, seq: env.seq, reason, message, runId: env.runId, attemptId: env.attemptId };
    this.errors.push(error);
    if (this.errors.length > this.maxErrors) {
      this.errors.shift();
      this.dropped++;
    }
    this.errorSubject.next(error);
  }

  private remove(s: Sub): void {
    if (!s.open) return;
    s.open = false;
    s.queue.clear();
    if (s.timer !== undefined) this.clock.clearTimeout(s.timer);
    s.timer = undefined;
    s.delivery = 0;
    s.current = undefined;
    this.subs.delete(s);
    if (this.requiredSubs.delete(s)) this.checkRoom();
    this.stop(s);
  }

  private stop(s: Sub): void {
    if (!s.running) return;
    s.running = false;
    if (--this.active === 0 && this.idleGate) {
      const g = this.idleGate;
      this.idleGate = undefined;
      g.resolve();
    }
  }

  private requiredQueued(): boolean {
    for (const s of this.requiredSubs) if (s.queue.length > 0) return true;
    return false;
  }

  private hasRoom(): boolean {
    if (this.closed) return true;
    for (const s of this.requiredSubs) if (isFull(s)) return false;
    return true;
  }

  /** Called when a required queue shrinks: releases `whenWritable` and `whenRequiredDrained`. */
  private checkRoom(): void {
    if (this.roomGate && this.hasRoom()) {
      const g = this.roomGate;
      this.roomGate = undefined;
      if (!this.drainGate) for (const s of this.requiredSubs) setRef(s.timer, false);
      g.resolve();
    }
    if (this.drainGate && !this.requiredQueued()) {
      const g = this.drainGate;
      this.drainGate = undefined;
      g.resolve();
    }
  }
}
