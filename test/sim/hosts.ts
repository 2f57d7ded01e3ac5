/**
 * The simulated processes a seed's sessions live in (simulate.ts, tree-simulate.ts): one live host
 * at a time — a process and the runtime booted in it — replaced after a crash or a takeover, its
 * sessions opened in it on first use, and the attempts run there.
 * Must not import vitest (`npm run sim` imports it).
 */
import { isExecutionBusy, isValidationError } from '../../src/contracts/errors.js';
import type { ExecutionRequest, ExecutionResult } from '../../src/contracts/requests.js';
import type { ExecutionSession } from '../../src/runtime/execution-session.js';
import type { Runtime } from '../../src/runtime/runtime.js';
import { NO_STORE_FAULTS, type FaultControl } from './faulty-store.js';
import type { SeedFacts } from './invariants.js';
import type { Proc, World } from './world.js';

/** A simulated process and the runtime booted in it, with the sessions opened there. */
export interface Host {
  proc: Proc;
  runtime: Runtime;
  sessions: Map<string, Promise<ExecutionSession | undefined>>;
}

/** Races `p` against the process going away: undefined when it went first. */
export async function inProc<T>(proc: Proc, p: Promise<T>): Promise<{ value: T } | { error: unknown } | undefined> {
  return Promise.race([
    p.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    ),
    proc.gone.then(() => undefined),
  ]);
}

/**
 * The seed's live host: booted at once and supervised — once its process crashes, unless it was
 * superseded (a takeover replaced it) or `ended()`, `crashed()` is told and, 1–40 ms later, a new
 * host is booted and supervised in turn.
 */
export class Hosts {
  current: Host;
  /** Resolves when the live host is replaced. */
  next!: Promise<void>;
  private changed!: () => void;

  constructor(
    private readonly world: World,
    private readonly facts: SeedFacts,
    private readonly boot: () => Host,
    private readonly o: { ended(): boolean; crashed(): void; opened(sid: string, s: ExecutionSession): void },
  ) {
    this.current = boot();
    this.renew();
    this.supervise(this.current);
  }

  /** A new host takes over (after a crash, a takeover, or for the fault-free last word); `supervised`: restarted when it crashes. */
  replace(supervised: boolean): void {
    this.current = this.boot();
    const done = this.changed;
    this.renew();
    done();
    if (supervised) this.supervise(this.current);
  }

  /**
   * The live host's session `sid`, opened there on first use; undefined while its process is gone
   * (after the next host came) or when the open failed (tried again at the next call).
   */
  async session(sid: string): Promise<{ h: Host; s: ExecutionSession } | undefined> {
    const h = this.current;
    if (!h.proc.alive || h.proc.superseded) {
      await this.next;
      return undefined;
    }
    let p = h.sessions.get(sid);
    if (!p) {
      p = (async () => {
        const r = await inProc(h.proc, h.runtime.openSession(sid));
        if (!r) return undefined;
        if ('error' in r) {
          this.world.note(`${sid}: openSession failed: ${(r.error as Error).message}`);
          return undefined;
        }
        const s = r.value;
        this.facts.recoveries.push({ proc: h.proc.id, instance: s.sessionInstanceId, recovery: s.recovery });
        this.o.opened(sid, s);
        return s;
      })();
      h.sessions.set(sid, p);
    }
    const s = await p;
    if (!s) {
      h.sessions.delete(sid);
      if (h.proc.alive && !h.proc.superseded) await this.world.sleep(5);
      return undefined;
    }
    return { h, s };
  }

  private renew(): void {
    this.next = new Promise<void>((r) => (this.changed = r));
  }

  private supervise(h: Host): void {
    void h.proc.gone.then(async () => {
      if (h.proc.superseded || this.o.ended()) return;
      this.o.crashed();
      await this.world.sleep(this.world.rng.range(1, 40));
      this.replace(true);
    });
  }
}

/**
 * Runs `req` on session `sid` in its host's process, noting the outcome in the trace: false when
 * the process went away first. A refusal is noted (an untyped one is a violation: `facts.untyped`);
 * a busy session is waited for.
 */
export async function attemptIn(
  world: World,
  facts: SeedFacts,
  sid: string,
  { h, s }: { h: Host; s: ExecutionSession },
  req: ExecutionRequest,
): Promise<boolean> {
  world.note(`${sid}: execute ${req.kind} ${req.runId}/${req.attemptId}`);
  const r = await inProc(h.proc, s.execute(req));
  if (!r) return false;
  if ('error' in r) {
    const e = r.error as Error;
    world.note(`${sid}: execute ${req.runId}/${req.attemptId} rejected: ${e.name}: ${e.message}`);
    if (isExecutionBusy(e)) await inProc(h.proc, s.waitForIdle());
    else if (!isValidationError(e)) facts.untyped = `${sid}: execute rejected with an untyped ${e?.name}: ${e?.message}`;
    return true;
  }
  const res: ExecutionResult = r.value;
  world.note(
    `${sid}: ${req.runId}/${req.attemptId} → ${res.status}${res.budget ? ` (${res.budget})` : ''}${res.error ? `: ${res.error.message.slice(0, 80)}` : ''}`,
  );
  return true;
}

/** The last word's start: every process (paused ones woken) crashes, and the store's faults stop. */
export function dropEveryProcess(world: World, ctl: FaultControl): void {
  for (const p of world.procs) {
    p.wake();
    if (p.alive) p.crash();
  }
  ctl.faults = NO_STORE_FAULTS;
  ctl.crashesLeft = 0;
}
