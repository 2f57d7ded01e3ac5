import { IdInput } from '../contracts/ids.js';
import { ValidationError } from '../contracts/errors.js';
import type { IdentifiedRequest } from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import type { EventStore } from '../persistence/event-store.js';
import type { LogWriter } from '../persistence/log-writer.js';
import { awaitedRequest, type OpenRunState } from '../persistence/open-run.js';
import { ApprovalAnswer } from './answer-schema.js';
import type { RunHandle } from './run-handle.js';

export type Decision = 'approve' | 'deny';

/** What `session.approve(callId)` / `session.deny(callId)` resolve with. */
export interface ApprovalReceipt {
  runId: string;
  questionId: string;
  callId: string;
  decision: Decision;
  /** Calls of the approval still undecided (the run resumes once none is). */
  undecided: string[];
  /** The attempt that resumed the run, when this decision was the last one. */
  run?: RunHandle;
}

/** What deciding reads and does on its session. */
export interface DecidingSession {
  sessionId: string;
  store: EventStore;
  writer: LogWriter;
  /** The open run as the session knows it now. */
  openRun(): OpenRunState | undefined;
  assertOpen(): void;
  /** Resumes the run with every call's decision (session.run of a respond). */
  respond(runId: string, questionId: string, answer: { decisions: Record<string, Decision> }): RunHandle;
}

const SESSION_LEVEL = { turn: 0, step: 0, attempt: 0 };

/**
 * Approvals answered one call at a time (docs/approvals.md): each decision is durable before its
 * call resolves (an `approval/call-decided` event, so that decisions given before a restart
 * count after it), and once every call of the pending approval is decided the run resumes with
 * them all — as one `respond` with the decisions map. A decision is final: the same one again is
 * idempotent (and resumes the run if every call is decided but it did not resume yet), the other
 * one is refused. One decision is recorded at a time.
 */
export class PerCallApprovals {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly s: DecidingSession) {}

  /** Records one decision; a bad call id or a closed session rejects (as every other failure does), never throws. */
  async decide(callId: string, decision: Decision, where: string): Promise<ApprovalReceipt> {
    parseInput(IdInput, callId, `${where}: callId`);
    this.s.assertOpen();
    const next = this.queue.then(() => this.record(callId, decision, where));
    // the next decision waits until the attempt this one started has ended (the approval is answered then)
    this.queue = next.then((r) => r.run?.result).catch(() => undefined);
    return next;
  }

  private async record(callId: string, decision: Decision, where: string): Promise<ApprovalReceipt> {
    const open = this.s.openRun();
    // (a run whose cancel stands waits for no answer: its next attempt ends it cancelled)
    const pr = open ? awaitedRequest(open) : undefined;
    if (!open || !pr || pr.kind !== 'approval')
      throw new ValidationError(where, [{ path: ['callId'], message: `no approval is pending in session ${this.s.sessionId}` }]);
    if (!pr.calls.some((c) => c.callId === callId))
      throw new ValidationError(where, [
        {
          path: ['callId'],
          message: `call ${callId} is not one of approval ${pr.questionId}'s (${pr.calls.map((c) => c.callId).join(', ')})`,
        },
      ]);
    const decided = await recordedDecisions(this.s.store, this.s.sessionId, open.pending!.seq, pr.questionId);
    const before = decided.get(callId);
    if (before !== undefined && before !== decision)
      throw new ValidationError(where, [{ path: ['callId'], message: `call ${callId} was already decided: ${before}` }]);
    if (before === undefined) {
      const payload = { runId: open.runId, questionId: pr.questionId, callId, decision };
      await this.s.writer.appendNow([this.s.writer.draft('approval/call-decided', SESSION_LEVEL, payload)]);
      decided.set(callId, decision);
    }
    const undecided = pr.calls.map((c) => c.callId).filter((id) => !decided.has(id));
    const receipt: ApprovalReceipt = { runId: open.runId, questionId: pr.questionId, callId, decision, undecided };
    if (undecided.length > 0) return receipt;
    // the answer's decisions are keyed by call id, as `approval/decided` records them
    return { ...receipt, run: this.s.respond(open.runId, pr.questionId, { decisions: Object.fromEntries(decided) }) };
  }
}

/** The decisions recorded for `questionId` since its request (at `fromSeq`), by call id. */
async function recordedDecisions(
  store: EventStore,
  sessionId: string,
  fromSeq: number,
  questionId: string,
): Promise<Map<string, Decision>> {
  const out = new Map<string, Decision>();
  for await (const e of store.readEvents(sessionId, { fromSeq })) {
    if (e.type === 'approval/call-decided' && e.payload.questionId === questionId && !out.has(String(e.payload.callId)))
      out.set(String(e.payload.callId), e.payload.decision as Decision);
  }
  return out;
}

/**
 * A respond's answer to the pending approval, with the decisions `approve` / `deny` recorded for
 * it: a call the answer leaves out takes its recorded decision (not the denial a left-out call
 * gets), and an answer that contradicts one is refused (ValidationError) — a decision is final.
 * Any other request, or an answer that is not an approval's, is returned as it is.
 */
export async function withRecordedDecisions(
  store: EventStore,
  sessionId: string,
  open: OpenRunState | undefined,
  req: IdentifiedRequest,
): Promise<IdentifiedRequest> {
  const pending = open?.runId === req.runId ? open.pending : undefined;
  if (req.kind !== 'respond' || pending?.pendingRequest.kind !== 'approval' || pending.pendingRequest.questionId !== req.questionId)
    return req;
  const given = ApprovalAnswer.safeParse(req.answer);
  if (!given.success) return req; // refused, naming what is wrong, when the attempt's input is made
  const recorded = await recordedDecisions(store, sessionId, pending.seq, req.questionId);
  if (recorded.size === 0) return req;
  const decisions = new Map(Object.entries(given.data.decisions));
  const issues: { path: string[]; message: string }[] = [];
  for (const [callId, decision] of recorded) {
    const answered = decisions.get(callId);
    if (answered === undefined) decisions.set(callId, decision);
    else if (answered !== decision)
      issues.push({ path: ['decisions', callId], message: `call ${callId} was already decided: ${decision} (session.${decision})` });
  }
  if (issues.length > 0) throw new ValidationError('session.execute: answer', issues);
  return { ...req, answer: { decisions: Object.fromEntries(decisions) } };
}
