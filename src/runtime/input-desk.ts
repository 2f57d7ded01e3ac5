import { ValidationError } from '../contracts/errors.js';
import { toMessages, type InputEnvelope, type InputReceipt } from '../contracts/requests.js';
import type { ModelProvider } from '../contracts/model.js';
import { assertContentTaken, storeMessages, type ContentLimits } from '../persistence/content-parts.js';
import type { EventStore } from '../persistence/event-store.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { InputQueue } from './input-queue.js';
import { settledInputReceipt } from './log-lookups.js';
import { runIdTaken } from './run-claims.js';

/** What accepting an input asks of its session. */
export interface InputHooks {
  /** Refuses an input whose inputId names a run that exists (it may run as runId = inputId). */
  checkNewRun(inputId: string): Promise<void>;
  /** Throws if the session closed meanwhile. */
  assertOpen(): void;
  /** The input is durable and queued. */
  accepted(mode: InputEnvelope['mode']): void;
  /** The run id a prompt being prepared has claimed, if any. */
  claimedRunId(): string | undefined;
}

/**
 * Where a session's inputs are accepted and withdrawn (DESIGN §4 item 9): `input/accepted` is
 * committed before the receipt; the same inputId again returns the same receipt (also while the
 * first is being written, and from the log after a restart); a withdrawn input is `input/cancelled`.
 */
export class InputDesk {
  private readonly inflight = new Map<string, { mode: InputEnvelope['mode']; promise: Promise<InputReceipt> }>();

  constructor(
    private readonly sessionId: string,
    private readonly store: EventStore,
    private readonly writer: LogWriter,
    private readonly inputs: InputQueue,
    private readonly limits: ContentLimits,
    /** The session's model now (its agent's): an input with a part it cannot take is refused. */
    private readonly model: () => ModelProvider,
  ) {}

  /** The mode of an input being accepted right now, if any. */
  submitting(inputId: string): InputEnvelope['mode'] | undefined {
    return this.inflight.get(inputId)?.mode;
  }

  async submit(e: InputEnvelope, hooks: InputHooks): Promise<InputReceipt> {
    // a follow-up runs as runId = inputId, and so may a steer (one no run takes): not an id a
    // prompt being prepared has claimed
    if (this.inputs.get(e.inputId) === undefined && !this.inflight.has(e.inputId) && hooks.claimedRunId() === e.inputId) {
      throw runIdTaken(this.sessionId, e.inputId, 'inputId', 'session.submitInput');
    }
    const known = this.inputs.get(e.inputId);
    if (known) return this.inputs.receipt(known);
    // the same inputId submitted again while the first is being accepted: the same receipt
    const inflight = this.inflight.get(e.inputId);
    if (inflight) return inflight.promise;
    const entry = { mode: e.mode, promise: this.accept(e, hooks) };
    this.inflight.set(e.inputId, entry);
    try {
      return await entry.promise;
    } finally {
      this.inflight.delete(e.inputId);
    }
  }

  private async accept(e: InputEnvelope, hooks: InputHooks): Promise<InputReceipt> {
    await Promise.resolve(); // registered as in flight by the caller first
    const stored = await this.store.getEventById(this.sessionId, `input:${e.inputId}`);
    if (stored) {
      const again = this.inputs.get(e.inputId);
      if (again) return this.inputs.receipt(again);
      // in the log, not in the queue: settled — or this very accept's append, whose answer was lost
      // (the writer then stops: the session never queued it, a reopen does)
      await this.writer.settleDoubt();
      return settledInputReceipt(this.store, this.sessionId, e.inputId);
    }
    await hooks.checkNewRun(e.inputId);
    // its images and files: refused when the model cannot take them, else stored as blobs before
    // input/accepted references them
    assertContentTaken(toMessages(e.message), this.model(), 'session.submitInput: message');
    const messages = await storeMessages(toMessages(e.message), this.store.blobs, this.limits, 'session.submitInput: message');
    hooks.assertOpen(); // closed while the log was read
    const draft = this.writer.draft(
      'input/accepted',
      { turn: 0, step: 0, attempt: 0 },
      { inputId: e.inputId, mode: e.mode, messages },
      `input:${e.inputId}`,
    );
    await this.writer.appendNow([draft]);
    const queued = this.inputs.get(e.inputId) ?? { inputId: e.inputId, mode: e.mode, messages, status: 'accepted' as const };
    if (!this.inputs.get(e.inputId)) this.inputs.add(queued);
    hooks.accepted(e.mode);
    return this.inputs.receipt(queued);
  }

  /** Withdraws an input not yet consumed; its receipt says what became of it. */
  async cancel(inputId: string): Promise<InputReceipt> {
    // its submit still being written: cancelled once it is accepted (never let through)
    const inflight = this.inflight.get(inputId);
    if (inflight) await inflight.promise.catch(() => undefined);
    const q = this.inputs.get(inputId);
    if (!q) {
      // accepted by an earlier process and no longer pending: consumed or cancelled
      if (await this.store.getEventById(this.sessionId, `input:${inputId}`))
        return settledInputReceipt(this.store, this.sessionId, inputId);
      throw new ValidationError('session.cancelInput', [{ path: ['inputId'], message: `no input ${inputId} in this session` }]);
    }
    if (q.status === 'accepted' && this.inputs.cancel(inputId)) {
      await this.writer.appendNow([
        this.writer.draft('input/cancelled', { turn: 0, step: 0, attempt: 0 }, { inputId }, `input-cancelled:${inputId}`),
      ]);
    }
    return this.inputs.receipt(q);
  }
}
