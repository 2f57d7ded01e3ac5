import { settledWithin, type Clock } from '../contracts/clock.js';
import { notRunResult, type ExecutionResult } from '../contracts/requests.js';

/** How long close() waits for a commit already under way, to answer its execute with what the log holds. */
const CLOSE_COMMIT_WAIT_MS = 2000;

interface Caller {
  resolve(r: ExecutionResult): void;
  reject(e: unknown): void;
}

const key = (runId: string, attemptId: string) => `${runId}\u0000${attemptId}`;

/**
 * The callers waiting on attempts: an execute waits under a token while its attempt is prepared,
 * then under its run and attempt ids while it runs. A settled attempt's result (with its delivery
 * errors) is kept until the session rests, when its caller gets it.
 */
export class AttemptCallers {
  private lastToken = 0;
  private readonly preparing = new Map<number, Caller & { runId: string; attemptId: string }>();
  private readonly running = new Map<string, Caller & { runId: string; attemptId: string }>();
  private readonly idleWaiters: (() => void)[] = [];
  private nextIdle: Promise<void> | undefined;
  /** Results of attempts that ended, while the session state is brought up to date. */
  private readonly finishing = new Map<string, ExecutionResult>();

  /** A new caller waiting for the attempt `ids`; its token names it to the session machine. */
  prepare(ids: { runId: string; attemptId: string }): { token: number; result: Promise<ExecutionResult> } {
    const token = ++this.lastToken;
    const result = new Promise<ExecutionResult>((resolve, reject) => this.preparing.set(token, { ...ids, resolve, reject }));
    return { token, result };
  }

  /** The run id of the attempt being prepared under `token` (an execute waiting for its log read). */
  runIdOf(token: number | undefined): string | undefined {
    return token === undefined ? undefined : this.preparing.get(token)?.runId;
  }

  /** The prepared attempt runs nothing: its caller gets `result` (or the error). */
  answer(token: number, result: ExecutionResult): void {
    this.preparing.get(token)?.resolve(result);
    this.preparing.delete(token);
  }

  refuse(token: number, error: unknown): void {
    this.preparing.get(token)?.reject(error);
    this.preparing.delete(token);
  }

  /** The attempt starts: its caller (the one preparing it under `token`, if any) now waits for its run's result. */
  started(runId: string, attemptId: string, token?: number): void {
    const waiting = token === undefined ? undefined : this.preparing.get(token);
    if (token !== undefined) this.preparing.delete(token);
    if (waiting) this.running.set(key(runId, attemptId), { runId, attemptId, resolve: waiting.resolve, reject: waiting.reject });
  }

  /**
   * Waits for the session to be idle (`idle()`): one promise for every wait until then (a served
   * session's poll asks at every wait of a long attempt; its waits do not pile up).
   */
  whenIdle(): Promise<void> {
    return (this.nextIdle ??= new Promise((resolve) => this.idleWaiters.push(resolve)));
  }

  idle(): void {
    this.nextIdle = undefined;
    for (const w of this.idleWaiters.splice(0)) w();
  }

  /** The attempt's settled result, kept until the session rests (close answers with it too). */
  settled(result: ExecutionResult): void {
    this.finishing.set(key(result.runId, result.attemptId), result);
  }

  /** The session rests after the attempt: its caller gets the settled result. */
  rested(result: ExecutionResult): void {
    const k = key(result.runId, result.attemptId);
    this.running.get(k)?.resolve(this.finishing.get(k) ?? result);
    this.running.delete(k);
    this.finishing.delete(k);
  }

  /**
   * The session closed: every caller gets a result (DESIGN §6) — a preparing one `detached`; a
   * stopped run never reports back, so its caller gets the result settled or recorded for it
   * (`recorded`, once a closing commit already under way has landed: `writes`), else `detached`.
   */
  async closeAll(
    writes: Promise<unknown>,
    clock: Clock,
    recorded: (ids: { runId: string; attemptId: string }) => Promise<ExecutionResult | undefined>,
  ): Promise<void> {
    for (const [token, c] of this.preparing) {
      this.preparing.delete(token);
      c.resolve(notRunResult(c, 'detached', 'the session was closed before the attempt started'));
    }
    if (this.running.size > 0) await settledWithin(clock, writes, CLOSE_COMMIT_WAIT_MS);
    for (const [k, c] of this.running) {
      const finished = this.finishing.get(k) ?? (await recorded(c).catch(() => undefined));
      c.resolve(
        finished ??
          notRunResult(
            c,
            'detached',
            `the session was closed while attempt ${c.attemptId} of run ${c.runId} ran; ` +
              `the run is left resumable: continue it with a new attempt`,
          ),
      );
    }
    this.running.clear();
    this.finishing.clear();
  }
}
