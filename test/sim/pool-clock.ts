/**
 * The worker-pool family's simulated clock (pool-simulate.ts): XState's SimulatedClock contract
 * (`now`, `setTimeout`, `clearTimeout`; a timer runs once the clock has moved `ms` past when it
 * was set, timers set while others run included), and it says when its next timer is due, so the
 * simulation jumps from one due time to the next instead of ticking through the idle ones.
 * Timers due together run in the order they are due, then in the order they were set.
 */
import type { Clock } from '../../src/contracts/clock.js';

interface Timer {
  at: number;
  fn: () => void;
}

export class PoolClock implements Clock {
  private t: number;
  private nextId = 1;
  private readonly timers = new Map<number, Timer>();

  constructor(start: number) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): number {
    const id = this.nextId++;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return id;
  }

  clearTimeout(id: unknown): void {
    this.timers.delete(id as number);
  }

  /** When the earliest timer is due (`undefined`: none is set). */
  nextDue(): number | undefined {
    let min: number | undefined;
    for (const { at } of this.timers.values()) if (min === undefined || at < min) min = at;
    return min;
  }

  /** Moves the clock to `time` and runs every timer due by then, earliest first. */
  advanceTo(time: number): void {
    if (time < this.t) throw new Error(`the clock cannot go back (from ${this.t} to ${time})`);
    this.t = time;
    for (;;) {
      let first: [number, Timer] | undefined;
      // Map order is the order of setting: the first of the earliest is the one set first
      for (const e of this.timers) if (e[1].at <= time && (!first || e[1].at < first[1].at)) first = e;
      if (!first) return;
      this.timers.delete(first[0]);
      first[1].fn();
    }
  }
}
