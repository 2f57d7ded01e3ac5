import { ExecutionBusy } from '../contracts/errors.js';
import type { SessionServices } from '../actors/session-services.js';
import { releaseFor } from '../persistence/open-run.js';
import type { Message } from '../contracts/message.js';
import { openRunBusy } from './attempt-input.js';
import type { OpenRunTracker } from './open-run-tracker.js';

const SESSION_LEVEL = { turn: 0, step: 0, attempt: 0 };

/**
 * The session-level records an app writes between runs (DESIGN §6): app state
 * (`state/updated`), a checkpoint as a new surface base (`checkpoint/loaded`), released locks
 * (`resources/released`). Each is durable before its call resolves.
 */
export class SessionRecords {
  /** App JSON persisted with the session. */
  stateContext: unknown;

  constructor(
    private readonly sessionId: string,
    private readonly env: SessionServices,
    private readonly runs: OpenRunTracker,
    stateContext: unknown,
  ) {
    this.stateContext = stateContext;
  }

  async setState(value: unknown): Promise<void> {
    await this.env.writer.appendNow([this.env.writer.draft('state/updated', SESSION_LEVEL, { stateContext: value })]);
    this.stateContext = value;
  }

  /** While idle (`runningId` undefined and no run open). */
  async loadCheckpoint(c: { messages: Message[]; stateContext?: unknown }, runningId: string | undefined): Promise<void> {
    if (runningId !== undefined) throw new ExecutionBusy(this.sessionId, runningId);
    if (this.runs.open) throw openRunBusy(this.sessionId, this.runs.open);
    await this.env.writer.appendNow([this.env.writer.draft('checkpoint/loaded', SESSION_LEVEL, c)]);
    if (c.stateContext !== undefined) this.stateContext = c.stateContext;
  }

  async release(keys: string[]): Promise<void> {
    await this.env.writer.appendNow([this.env.writer.draft('resources/released', SESSION_LEVEL, { keys })]);
    // an interrupted call that continue will record uncertain does not take them again
    const open = this.runs.open;
    if (open) for (const c of open.unresolvedCalls) releaseFor(open, c, keys);
  }
}
