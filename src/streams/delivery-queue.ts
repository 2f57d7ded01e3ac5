// The small queue primitives the subscriber hub delivers through.

export function isThenable(v: unknown): v is PromiseLike<unknown> {
  return typeof v === 'object' && v !== null && typeof (v as { then?: unknown }).then === 'function';
}

export interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
}

export function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * True when `capacity` envelopes wait besides the one being delivered. With no delivery in flight
 * the head of the queue is that one (it goes out at the next flush), so a subscriber that keeps up
 * is never closed for a burst of envelopes published together.
 */
export function isFull(s: { readonly queue: { readonly length: number }; readonly current: unknown; readonly capacity: number }): boolean {
  return s.queue.length - (s.current === undefined ? 1 : 0) >= s.capacity;
}

/**
 * Lets a watchdog keep the process up (`ref`) or not (`unref`): a Node.js timer has both; another
 * clock's handle (a SimulatedClock's number) has neither and is left as it is.
 */
export function setRef(timer: unknown, ref: boolean): void {
  if (typeof timer !== 'object' || timer === null) return;
  const t = timer as { ref?: () => unknown; unref?: () => unknown };
  if (ref) t.ref?.();
  else t.unref?.();
}

/** A FIFO ring that grows by doubling (up to its subscriber's capacity) and never shifts. */
export class Ring<T> {
  private buf: (T | undefined)[] = [];
  private head = 0;
  length = 0;

  push(x: T): void {
    if (this.length === this.buf.length) this.grow();
    this.buf[(this.head + this.length) % this.buf.length] = x;
    this.length++;
  }

  shift(): T | undefined {
    if (this.length === 0) return undefined;
    const x = this.buf[this.head];
    this.buf[this.head] = undefined;
    this.head = (this.head + 1) % this.buf.length;
    this.length--;
    return x;
  }

  clear(): void {
    this.buf = [];
    this.head = 0;
    this.length = 0;
  }

  private grow(): void {
    const next = new Array<T | undefined>(Math.max(8, this.buf.length * 2));
    for (let i = 0; i < this.length; i++) next[i] = this.buf[(this.head + i) % this.buf.length];
    this.buf = next;
    this.head = 0;
  }
}
