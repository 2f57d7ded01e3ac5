import { SessionSteeringConflict } from '../contracts/errors.js';
import type { StopReceipt, StopRequest } from '../contracts/requests.js';
import type { SessionContext } from '../machines/session.machine.js';
import { canonicalJson } from '../persistence/codec.js';
import type { EventStore } from '../persistence/event-store.js';
import type { LogWriter } from '../persistence/log-writer.js';

type Attempt = NonNullable<SessionContext['current']>;

const reused = (key: string) => new SessionSteeringConflict('idempotencyKey', `idempotency key ${key} was used for a different request`);

/**
 * DESIGN §4 item 10: stop requests of one session instance. Accepted only for this session, this
 * instance, the running interaction and its run epoch; durable (`steering/accepted`) before the
 * receipt is returned. The same idempotency key again returns the same receipt (also while the
 * first is being written, and from the log after a restart); reused for another request it is a
 * SessionSteeringConflict.
 */
export class StopRequests {
  private readonly accepted = new Map<string, { request: string; receipt: StopReceipt }>();
  private readonly inflight = new Map<string, { request: string; promise: Promise<StopReceipt> }>();

  constructor(
    private readonly sessionId: string,
    private readonly sessionInstanceId: string,
    private readonly fingerprint: () => string,
    private readonly store: EventStore,
    private readonly writer: LogWriter,
  ) {}

  /** `current`: the attempt under way; `accepted` is told once the acceptance is durable. */
  async request(req: StopRequest, on: { current(): SessionContext['current']; accepted(attempt: Attempt): void }): Promise<StopReceipt> {
    const canonical = canonicalJson(req);
    // the same key again while the first is being written (a client's retry): the same answer
    const inflight = this.inflight.get(req.idempotencyKey);
    if (inflight) {
      if (inflight.request !== canonical) throw reused(req.idempotencyKey);
      return inflight.promise;
    }
    const promise = this.accept(req, canonical, on);
    this.inflight.set(req.idempotencyKey, { request: canonical, promise });
    try {
      return await promise;
    } finally {
      this.inflight.delete(req.idempotencyKey);
    }
  }

  private async accept(
    req: StopRequest,
    canonical: string,
    on: { current(): SessionContext['current']; accepted(attempt: Attempt): void },
  ): Promise<StopReceipt> {
    const seen = this.accepted.get(req.idempotencyKey);
    if (seen) {
      if (seen.request !== canonical) throw reused(req.idempotencyKey);
      return seen.receipt;
    }
    const stored = await this.store.getEventById(this.sessionId, `steer:${req.idempotencyKey}`);
    if (stored) {
      if (canonicalJson(stored.payload.request) !== canonical) throw reused(req.idempotencyKey);
      return stored.payload.receipt as StopReceipt;
    }
    if (req.sessionId !== this.sessionId)
      throw new SessionSteeringConflict('sessionId', `request names session ${req.sessionId}, this is ${this.sessionId}`);
    if (req.sessionInstanceId !== this.sessionInstanceId) {
      throw new SessionSteeringConflict(
        'sessionInstanceId',
        `request names session instance ${req.sessionInstanceId}, the current one is ${this.sessionInstanceId}`,
      );
    }
    const cur = on.current();
    if (!cur || cur.runId !== req.interactionId) {
      throw new SessionSteeringConflict(
        'interactionId',
        `interaction ${req.interactionId} is not running (running: ${cur?.runId ?? 'none'})`,
      );
    }
    if (cur.runEpoch !== req.expectedRunEpoch) {
      throw new SessionSteeringConflict('expectedRunEpoch', `run ${cur.runId} is at epoch ${cur.runEpoch}, not ${req.expectedRunEpoch}`);
    }
    const receipt: StopReceipt = { schemaVersion: 1, request: req, executionProfileFingerprint: this.fingerprint() };
    const draft = this.writer.draft(
      'steering/accepted',
      { turn: 0, step: 0, attempt: cur.runEpoch },
      { request: req, receipt },
      `steer:${req.idempotencyKey}`,
    );
    await this.writer.appendNow([draft]);
    this.accepted.set(req.idempotencyKey, { request: canonical, receipt });
    on.accepted(cur);
    return receipt;
  }
}
