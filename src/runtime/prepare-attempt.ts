import { isExecutionBusy, isStoreClosedError, isValidationError } from '../contracts/errors.js';
import { notRunResult, type ExecutionResult, type IdentifiedRequest } from '../contracts/requests.js';
import type { SessionServices } from '../actors/session-services.js';
import type { PrepareOutput } from '../machines/session.machine.js';
import type { EventStore } from '../persistence/event-store.js';
import { attemptInput } from './attempt-input.js';
import { withRecordedDecisions } from './per-call-approvals.js';
import { toMessages } from '../contracts/requests.js';
import { anyParts, assertContentTaken, storeMessages } from '../persistence/content-parts.js';
import { recordedResult, unreadLogResult } from './log-lookups.js';
import type { OpenRunTracker } from './open-run-tracker.js';
import type { ResolvedRuntimeOptions } from './options.js';
import { recoveredReservation, settleInterruptedFinal, spentOf } from './recovery-outcome.js';
import { addCounted, noneCounted } from '../contracts/reservation.js';
import type { ToolSet } from './tool-set.js';
import type { LoopBudget } from '../contracts/config.js';
import type { OutputSpec } from '../actors/final-output.js';

/** What preparing an attempt reads of its session. */
export interface AttemptSession {
  sessionId: string;
  store: EventStore;
  env: SessionServices;
  options: ResolvedRuntimeOptions;
  /** The runtime's output schema, built once per runtime. */
  runtimeOutput: OutputSpec | undefined;
  /** The tools of an attempt starting now (a live list's as it is now) and its execution-profile fingerprint. */
  toolSet(): ToolSet;
  runs: OpenRunTracker;
  lastTurn(): number;
  closed(): boolean;
  isKilled(): boolean;
  /** A cancel came while the attempt is prepared: it starts cancelled (read when it is decided, after the log reads). */
  cancelPending(): boolean;
  /** The budget of the open run, which started with agent `name` (through a handoff, the run keeps its budget). */
  runBudget(name: string | undefined): LoopBudget;
  /** Refuses (ValidationError) a prompt's run id that names a run already. */
  assertNewRunId(runId: string): Promise<void>;
  /** A run settled while preparing (an interrupted final settled): the session's last result. */
  settledResult(result: ExecutionResult): void;
}

const closedBefore = (req: IdentifiedRequest) => notRunResult(req, 'detached', 'the session was closed before the attempt started');

/**
 * The session machine's `prepareAttempt` (DESIGN §6): reads the log and decides what an execute
 * request does — returns a recorded attempt's result (never running it again), refuses a run id
 * taken or a request that does not fit the open run (ValidationError, ExecutionBusy), answers
 * without running on a closed, fenced or killed session, settles a final an interrupted attempt
 * committed (never a new answer), and otherwise makes the run input of the attempt. A log that
 * cannot be read is a `failed` result (nothing started or written; execute it again).
 */
export async function prepareAttempt(s: AttemptSession, req: IdentifiedRequest): Promise<PrepareOutput> {
  try {
    const recorded = await recordedResult(s.store, s.sessionId, req.runId, req.attemptId, s.runs.open?.runId);
    if (recorded) return { result: recorded };
    // a run is one interaction: its id names its results, deliveries and final message ids
    if (req.kind === 'prompt') await s.assertNewRunId(req.runId);
    if (s.closed()) return { result: closedBefore(req) };
    if (s.env.writer.fenced)
      return {
        result: notRunResult(req, 'fenced', 'this session instance was fenced: another writer attached to the session; open it again'),
      };
    if (s.isKilled()) return { result: notRunResult(req, 'cancelled', 'the kill switch is set: no new attempt starts') };
    // read back first: the open run's committed final may be what the last read missed
    await s.runs.current();
    const settled = await settledFinal(s, req);
    if (settled) return { result: settled };
    const openRun = s.runs.open;
    // an approval's calls decided one at a time (session.approve/deny) keep their decisions
    req = await withRecordedDecisions(s.store, s.sessionId, openRun, req);
    // a prompt's images and files: refused when the model cannot take them, else stored as blobs
    // before the run logs its user/message
    if (req.kind === 'prompt' && typeof req.message !== 'string' && anyParts(toMessages(req.message))) {
      assertContentTaken(toMessages(req.message), s.env.model, 'session.execute: message');
      req = {
        ...req,
        message: await storeMessages(toMessages(req.message), s.store.blobs, s.options.contentLimits, 'session.execute: message'),
      };
    }
    // a sub-agent's run: what it recorded before (an earlier life's calls, a crashed call at its
    // reservation) counts in its ancestors' pools from now on, as its new calls will
    const pool = s.env.budgets?.above();
    // a prompt starts a run under the current agent's budget; a respond or continue keeps its run's
    const budget = req.kind !== 'prompt' && openRun ? s.runBudget(openRun.agent) : s.options.budget;
    const run = attemptInput(req, {
      // (no await after this read: a cancel sent while the log was read is in)
      cancelled: s.cancelPending(),
      sessionId: s.sessionId,
      toolSet: s.toolSet(),
      options: s.options,
      budget,
      runtimeOutput: s.runtimeOutput,
      now: s.env.clock.now(),
      openRun,
      lastTurn: s.lastTurn(),
      spentOf: (open) => spentOf(s.env, open),
      recoveredReservation: (spent) =>
        recoveredReservation(s.env, budget, { ...spent, counted: spent.counted ?? noneCounted() }, pool?.available()),
    });
    if (pool && run.spent) {
      const { usage, cost, counted = noneCounted() } = run.spent;
      pool.charge(addCounted({ outputTokens: usage.outputTokens, cost }, counted));
    }
    return { run };
  } catch (e) {
    // closed (or its store closed) while the attempt was still being prepared: not an input error
    if (s.closed() || isStoreClosedError(e)) return { result: closedBefore(req) };
    if (isValidationError(e) || isExecutionBusy(e)) throw e;
    // the log could not be read (a store error): nothing started, nothing was written
    return { result: unreadLogResult(req, e) };
  }
}

/**
 * A continue of a run whose final was committed by an attempt whose closing commit failed:
 * settled as after a restart (DESIGN §5: redelivered to an idempotent owner, else
 * delivery/unknown) — the run's settled result, never a new answer. Undefined when there is
 * no such final, or it was settled and the run goes on.
 */
async function settledFinal(s: AttemptSession, req: IdentifiedRequest): Promise<ExecutionResult | undefined> {
  const open = s.runs.open;
  if (req.kind !== 'continue' || open?.runId !== req.runId || open.undeliveredFinals.length === 0) return undefined;
  let stillOpen;
  try {
    stillOpen = await settleInterruptedFinal(s.env, { ...open, attemptId: req.attemptId });
  } catch (e) {
    if (s.closed() || isStoreClosedError(e)) return closedBefore(req);
    return {
      ...notRunResult(req, 'failed', `settling the run's committed final failed: ${(e as Error)?.message ?? e}; continue it again`),
      historyConsistent: true,
    };
  }
  if (stillOpen !== undefined) return undefined;
  s.runs.settled(req.runId);
  const result =
    (await recordedResult(s.store, s.sessionId, req.runId, req.attemptId, undefined)) ??
    notRunResult(req, 'failed', 'the interrupted final was settled but its run/end cannot be read back');
  s.settledResult(result);
  return result;
}
