import type { ExecutionResult } from '../contracts/requests.js';

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
  /** Results of attempts that ended, while the session state is brought up to date. */
  private readonly finishing = new Map<string, ExecutionResult>();

  /** A new caller waiting for the attempt `ids`; its token names it to the session machine. */
  prepare(ids: { runId: string; attemptId: string }): { token: number; result: Promise<ExecutionResult> } {
    const token = ++this.lastToken;
    const result = new Promise<ExecutionResult>((resolve, reject) => this.preparing.set(token, { ...ids, resolve, reject }));
    return { token, result };
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

  /** The attempt starts: its caller (the preparing one, or `caller`) now waits for its run's result. */
  started(runId: string, attemptId: string, token?: number, caller?: Caller): void {
    const waiting = token === undefined ? caller : this.preparing.get(token);
    if (token !== undefined) this.preparing.delete(token);
    if (waiting) this.running.set(key(runId, attemptId), { runId, attemptId, resolve: waiting.resolve, reject: waiting.reject });
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

  get anyRunning(): boolean {
    return this.running.size > 0;
  }

  /**
   * The session closed: every caller gets a result — a preparing one `detached`, a running one
   * the result settled or recorded for it (`recorded`), else `detached`.
   */
  async closeAll(recorded: (ids: { runId: string; attemptId: string }) => Promise<ExecutionResult | undefined>, detached: (ids: { runId: string; attemptId: string }, running: boolean) => ExecutionResult): Promise<void> {
    for (const [token, c] of this.preparing) {
      this.preparing.delete(token);
      c.resolve(detached(c, false));
    }
    for (const [k, c] of this.running) {
      const finished = this.finishing.get(k) ?? (await recorded(c).catch(() => undefined));
      c.resolve(finished ?? detached(c, true));
    }
    this.running.clear();
    this.finishing.clear();
  }
}
