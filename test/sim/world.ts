/**
 * The simulator's world: one seeded PRNG that makes every nondeterministic choice, one simulated
 * clock with one queue of timed tasks (the runtime's own timers, every latency of the store, the
 * model, the tools and the delivery owner), and the simulated processes that host runtimes.
 *
 * Everything runs in this Node process, on one event loop with no I/O and no real timers: between
 * two tasks the loop is drained (microtasks and immediates), so the order of every effect is a
 * function of the seed alone. Each random choice is recorded (the schedule); a replay can follow
 * only a prefix of it and take the benign choice (0 / false: no fault, first in line) after it.
 */
import { setImmediate as immediate } from 'node:timers';
import type { Clock } from '../../src/contracts/clock.js';

/** splitmix32: small, fast, good enough for schedules. */
export class Prng {
  private state: number;
  /** Every choice made, in order: the seed's schedule. */
  readonly choices: number[] = [];
  constructor(
    seed: number,
    /** Follow the generator for this many choices, then choose benignly (0). Infinity: always follow. */
    private readonly prefix = Infinity,
  ) {
    this.state = seed >>> 0;
  }
  private next(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    let z = this.state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  }
  /** An integer in [0, n): 0 is always the benign choice. */
  int(n: number): number {
    const raw = this.next(); // drawn even past the prefix: later draws stay aligned with the seed's
    const v = this.choices.length < this.prefix ? raw % Math.max(1, n) : 0;
    this.choices.push(v);
    return v;
  }
  /** True with probability p (false is benign). */
  chance(p: number): boolean {
    if (p <= 0) return false;
    return this.int(1_000_000) >= (1 - p) * 1_000_000;
  }
  /** An integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
}

interface Task {
  at: number;
  tie: number;
  order: number;
  proc: Proc | undefined;
  fn: () => void;
  cancelled: boolean;
}

/** A simulated OS process: it hosts one runtime. Crashed, it runs nothing more; paused, it waits. */
export class Proc {
  alive = true;
  paused = false;
  private wakeList: (() => void)[] = [];
  /** Resolves when the process crashes or is superseded by a takeover (its clients move on). */
  readonly gone: Promise<void>;
  private markGone!: () => void;
  superseded = false;
  constructor(
    readonly world: World,
    readonly id: number,
  ) {
    this.gone = new Promise((r) => (this.markGone = r));
  }
  crash(): void {
    if (!this.alive) return;
    this.alive = false;
    this.wakeList = [];
    this.world.note(`proc ${this.id} CRASH`);
    this.markGone();
  }
  pause(): void {
    this.paused = true;
    this.world.note(`proc ${this.id} PAUSE`);
  }
  supersede(): void {
    this.superseded = true;
    this.markGone();
  }
  wake(): void {
    if (!this.paused) return;
    this.paused = false;
    this.world.note(`proc ${this.id} WAKE`);
    for (const f of this.wakeList.splice(0)) f();
  }
  /** Runs `fn` now, or when the process wakes; never once it has crashed. */
  whenRunning(fn: () => void): void {
    if (!this.alive) return;
    if (this.paused) this.wakeList.push(fn);
    else fn();
  }
  /** Waits for the process to run (paused: until woken); a crashed process waits forever. */
  gate(): Promise<void> {
    return new Promise((resolve) => this.whenRunning(resolve));
  }
  /** Sleeps `ms` of simulated time in this process; aborts with `reason()` if `signal` fires. */
  sleep(ms: number, signal?: AbortSignal, reason?: () => unknown): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(reason?.());
      const onAbort = () => (this.world.clear(t), reject(reason?.()));
      const t = this.world.at(this.world.now + ms, () => (signal?.removeEventListener('abort', onAbort), resolve()), this);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
  /** The runtime's clock in this process: its timers die with it, and wait while it is paused. */
  clock(): Clock {
    return {
      now: () => this.world.now,
      setTimeout: (fn, ms) => this.world.at(this.world.now + Math.max(0, ms), fn, this),
      clearTimeout: (id) => this.world.clear(id as Task),
    };
  }
}

/** Never resolves: what a call into a crashed process looks like from inside it. */
export const never = <T>(): Promise<T> => new Promise<T>(() => {});

const drainOnce = () => new Promise<void>((r) => immediate(r));

export class World {
  now = 1_700_000_000_000;
  readonly rng: Prng;
  private readonly queue: Task[] = [];
  private order = 0;
  /** What happened, in order (faults, client actions): printed with a failing seed's trace. */
  readonly notes: string[] = [];
  readonly procs: Proc[] = [];
  tasksRun = 0;
  constructor(seed: number, prefix = Infinity) {
    this.rng = new Prng(seed, prefix);
  }
  note(s: string): void {
    this.notes.push(`t+${this.now - 1_700_000_000_000} ${s}`);
  }
  newProc(): Proc {
    const p = new Proc(this, this.procs.length + 1);
    this.procs.push(p);
    this.note(`proc ${p.id} START`);
    return p;
  }
  /** Schedules `fn` at time `at` (ties broken by the PRNG: concurrent replies arrive in seed order). */
  at(at: number, fn: () => void, proc?: Proc): Task {
    const t: Task = { at, tie: this.rng.int(1024), order: this.order++, proc, fn, cancelled: false };
    // binary insertion: (at, tie, order)
    let lo = 0;
    let hi = this.queue.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const q = this.queue[mid]!;
      if (q.at < t.at || (q.at === t.at && (q.tie < t.tie || (q.tie === t.tie && q.order < t.order)))) lo = mid + 1;
      else hi = mid;
    }
    this.queue.splice(lo, 0, t);
    return t;
  }
  clear(t: Task | undefined): void {
    if (t) t.cancelled = true;
  }
  /** World time passing outside any process (a person waiting, an external system). */
  sleep(ms: number): Promise<void> {
    return new Promise((r) => this.at(this.now + ms, r));
  }
  /**
   * Runs tasks in time order, draining the event loop between them, until none is left or
   * `maxTasks` ran. Returns false when it stopped at the limit.
   */
  async run(maxTasks: number): Promise<boolean> {
    await this.drain();
    while (this.queue.length > 0) {
      if (this.tasksRun >= maxTasks) return false;
      const t = this.queue.shift()!;
      if (t.cancelled) continue;
      this.tasksRun++;
      if (t.at > this.now) this.now = t.at;
      if (t.proc) t.proc.whenRunning(t.fn);
      else t.fn();
      await this.drain();
    }
    return true;
  }
  async drain(): Promise<void> {
    await drainOnce();
    await drainOnce();
  }
}
