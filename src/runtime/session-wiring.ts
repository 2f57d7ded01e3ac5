import { withOutput } from '../actors/final-output.js';
import type { ExecutionResult } from '../contracts/requests.js';
import { PAST_CANCEL } from '../machines/run.machine.js';
import type { PrepareInput, PrepareOutput, SessionContext, SessionEvent } from '../machines/session.machine.js';
import { AttemptCallers } from './attempt-callers.js';
import { AttemptStarts } from './attempt-starts.js';
import { InputDesk } from './input-desk.js';
import { OpenRunTracker } from './open-run-tracker.js';
import type { AttemptSession } from './prepare-attempt.js';
import { RunControl } from './run-control.js';
import { assertNewRunId } from './run-claims.js';
import { createSessionActor } from './session-actors.js';
import { SessionClosing } from './session-closing.js';
import type { SessionDeps } from './session-deps.js';
import { SessionRecords } from './session-records.js';
import { settleAttempt } from './settle-attempt.js';
import { StopRequests } from './stop-requests.js';
import { awaitedRequest } from '../persistence/open-run.js';

/** What a session's parts ask of the session itself: the work its machine invokes, and what it last ran. */
export interface SessionHost {
  /** Records `result` as the session's last (snapshot() reads it). */
  settled(result: ExecutionResult): void;
  /** The session machine's `prepareAttempt` actor. */
  prepare(input: PrepareInput): Promise<PrepareOutput>;
  /** The session machine rests, after `result`'s attempt if one settled. */
  rested(result: ExecutionResult | undefined): void;
}

/** The helpers one session delegates to, wired to each other and to its session actor (not yet started). */
export interface SessionParts {
  actor: ReturnType<typeof createSessionActor>;
  callers: AttemptCallers;
  runs: OpenRunTracker;
  desk: InputDesk;
  records: SessionRecords;
  control: RunControl;
  starts: AttemptStarts;
  closing: SessionClosing;
  attemptSession: AttemptSession;
  /** A run id names one run: refused if a run (or a follow-up waiting to start) already has it. */
  assertNewRunId: (runId: string, field: string, where: string) => Promise<void>;
}

/**
 * Builds a session's helpers from what `openSession` read and built (`d`, its services whole:
 * nothing here assigns them) and attaches its subscriber hub to its envelopes. The session
 * starts the returned actor once it holds the parts.
 */
export function wireSession(d: SessionDeps, host: SessionHost): SessionParts {
  const { sessionId, sessionInstanceId, store, env, options } = d;
  const callers = new AttemptCallers();
  const runs = new OpenRunTracker(store, sessionId, d.openRun);
  const desk = new InputDesk(sessionId, store, env.writer, d.inputs, env.contentLimits, () => env.model);
  const records = new SessionRecords(sessionId, env, runs, d.stateContext);
  const { toolSet } = d;
  // (read when each attempt is made: a handoff changes the session's agent, and with it the default output schema)
  const starts = new AttemptStarts(
    {
      env,
      options,
      stream: d.stream,
      callers,
      inputs: d.inputs,
      toolSet,
      get runtimeOutput() {
        return d.runtimeOutput;
      },
    },
    d.lastTurn,
  );
  // the actor is created below; these read and send to it only once it has started
  const snapshot = () => actor.getSnapshot();
  const send = (e: SessionEvent) => actor.send(e);
  const phase = () => String(snapshot().value);
  const current = (): SessionContext['current'] => snapshot().context.current;
  /** The running attempt's end is decided (its final committed, or its end being committed): a cancel is too late. */
  const settled = (): boolean => {
    const run = snapshot().children.run as { getSnapshot(): { value: unknown } } | undefined;
    return run !== undefined && PAST_CANCEL.has(String(run.getSnapshot().value));
  };
  const claims = (runId: string, field: string, where: string) =>
    assertNewRunId(
      {
        sessionId,
        store,
        inputs: d.inputs,
        currentRunId: current()?.runId,
        claimedRunId: snapshot().context.claimedRunId,
        openRun: runs.open,
      },
      runId,
      field,
      where,
    );
  const attemptSession: AttemptSession = {
    sessionId,
    store,
    env,
    options,
    get runtimeOutput() {
      return d.runtimeOutput;
    },
    toolSet,
    runs,
    lastTurn: () => starts.lastTurn,
    closed: () => phase() === 'closing' || phase() === 'closed',
    isKilled: () => d.isKilled(),
    cancelPending: () => actor.getSnapshot().context.cancelPending !== undefined,
    assertNewRunId: (runId) => claims(runId, 'runId', 'session.execute'),
    runBudget: (agent) => d.runBudget?.(agent) ?? options.budget,
    settledResult: (r) => host.settled(r),
  };
  d.hub.attach(d.stream.events$);
  const openRun = d.openRun ? (awaitedRequest(d.openRun) ? ('suspended' as const) : ('detached' as const)) : undefined;
  const settling = { hub: d.hub, callers, runs, writer: env.writer, stream: d.stream, settled: (r: ExecutionResult) => host.settled(r) };
  const closing = new SessionClosing({
    sessionId,
    store,
    writer: env.writer,
    clock: env.clock,
    callers,
    runs,
    stream: d.stream,
    hub: d.hub,
    send,
  });
  const work = {
    prepare: (i: PrepareInput) => host.prepare(i),
    settle: (r: ExecutionResult) => settleAttempt(settling, r),
    close: () => closing.work(),
  };
  const actor = createSessionActor(
    env,
    work,
    { sessionId, sessionInstanceId, writerEpoch: d.writerEpoch, ...(openRun ? { openRun } : {}) },
    options.inspect,
  );
  // the running attempt's execution profile: its output schema included
  const stops = new StopRequests(
    sessionId,
    sessionInstanceId,
    () => withOutput(toolSet().fingerprint, starts.latest?.output),
    store,
    env.writer,
  );
  const control = new RunControl({ phase, current, send, settled }, env.writer, stops, runs, env.waitStops);
  actor.on('session.rested', ({ result }) => host.rested(result));
  actor.on('attempt.answered', ({ token, result }) => callers.answer(token, result));
  actor.on('attempt.refused', ({ token, error }) => callers.refuse(token, error));
  return { actor, callers, runs, desk, records, control, starts, closing, attemptSession, assertNewRunId: claims };
}
