import type { ToolCallOutput } from '../contracts/calls.js';
import type { PendingRequest } from '../contracts/events.js';
import type { Counted } from '../contracts/reservation.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { CallControl, CallRuntime } from '../tools/call-runtime.js';

/** The control requests one call has been sent, kept for a listener that comes later. */
export class CallRequests {
  private readonly made: CallControl[] = [];
  private listeners: Set<(r: CallControl) => void> | undefined;

  constructor(initial: readonly CallControl[] = []) {
    this.made.push(...initial);
  }

  request(r: CallControl): void {
    if (this.made.includes(r)) return;
    this.made.push(r);
    for (const l of this.listeners ?? []) l(r);
  }

  on(listener: (r: CallControl) => void): () => void {
    for (const r of this.made) listener(r);
    (this.listeners ??= new Set()).add(listener);
    return () => void this.listeners?.delete(listener);
  }
}

/** A call's CallRuntime: the hold of the writer running it, and its control requests. */
export class RunningCall implements CallRuntime {
  /** Set by `leaveUnsettled`: the call's output carries it instead of a result. */
  unsettled: NonNullable<ToolCallOutput['unsettled']> | undefined;

  constructor(
    private readonly writer: LogWriter,
    private readonly requests: CallRequests,
  ) {}

  leaveUnsettled(pendingRequest?: PendingRequest, held?: Counted): void {
    this.unsettled = { ...(pendingRequest ? { pendingRequest } : {}), ...(held ? { held } : {}) };
  }

  lost(): unknown {
    return this.writer.effectRefusal();
  }

  async holds(): Promise<boolean> {
    // read again: a writer another process fenced learns it here (no read where the store keeps its head in memory)
    const fenced = this.writer.fencedNow() ?? (await this.writer.checkFenced());
    return !fenced && this.writer.mayStartEffect();
  }

  onControl(listener: (r: CallControl) => void): () => void {
    return this.requests.on(listener);
  }
}
