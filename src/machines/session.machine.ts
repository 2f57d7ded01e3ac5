import { notProvided } from './not-provided.js';
import { assign, emit, fromPromise, sendTo, setup } from 'xstate';
import { notRunResult, type ExecutionResult, type IdentifiedRequest } from '../contracts/requests.js';
import { runMachine, type RunInput } from './run.machine.js';

/** Where a session rests between attempts: nothing open, a run waiting for an answer, or a run left resumable. */
export type SessionRest = 'idle' | 'suspended' | 'detached';

export interface SessionInput {
  sessionId: string;
  sessionInstanceId: string;
  writerEpoch: number;
  /** What opening found: an open run waiting for an answer (`suspended`) or resumable (`detached`). */
  openRun?: Exclude<SessionRest, 'idle'>;
}

export interface SessionContext {
  sessionId: string;
  sessionInstanceId: string;
  writerEpoch: number;
  /** Where the session rests when no attempt is under way. */
  rest: SessionRest;
  /** The attempt under way (from its start to its settling). */
  current: { runId: string; attemptId: string; runEpoch: number } | undefined;
  /** The run the attempt under way runs (its run machine's input). */
  attempt: RunInput | undefined;
  /** The runId a prompt being prepared has claimed (a follow-up may not take it meanwhile). */
  claimedRunId: string | undefined;
  /** Another writer took over: the session rests `fenced` (an attempt prepared there runs nothing). */
  fenced: boolean;
  /** The caller whose attempt is being prepared (PREPARE's token). */
  preparing: number | undefined;
  /** A cancel (its reason) or detach asked for while the attempt was being prepared: the attempt starts with it. */
  cancelPending: string | undefined;
  /** That cancel's record's event id, if it asked for one (an inbox cancel's). */
  cancelRecordId: string | undefined;
  detachPending: boolean;
  /** The last attempt's result, until it is settled. */
  lastResult: ExecutionResult | undefined;
}

export type SessionEvent =
  /** An execute asks for an attempt: `prepareAttempt` reads the log and decides (`token` names the caller). */
  | { type: 'PREPARE'; token: number; request: IdentifiedRequest; claimedRunId?: string }
  /** A follow-up's run starts (its run input is made from the accepted input). */
  | { type: 'START'; run: RunInput }
  | { type: 'STOP_AFTER_ROUND' }
  | { type: 'CANCEL'; reason?: string; recordId?: string }
  | { type: 'DETACH' }
  | { type: 'CLOSE' };

/** What `prepareAttempt` decided: the run to start, or the caller's answer without running (recorded, refused, closed). */
export type PrepareOutput = { run: RunInput } | { result: ExecutionResult };
export interface PrepareInput {
  token: number;
  request: IdentifiedRequest;
}

/**
 * `session.rested` on reaching a resting state (or fenced): the facade answers the attempt and
 * starts what waits. `attempt.answered` / `attempt.refused`: a prepared attempt that runs nothing
 * answers its caller (`token`) with a result, or with the error execute rejects with.
 */
export type SessionEmitted =
  | { type: 'session.rested'; result: ExecutionResult | undefined }
  | { type: 'attempt.answered'; token: number; result: ExecutionResult }
  | { type: 'attempt.refused'; token: number; error: unknown };

/** What the `settleAttempt` actor decides once an attempt ended: where the session rests now. */
export type SettleOutput = { rest: SessionRest | 'fenced' };

const attemptOf = (run: RunInput) => ({
  attempt: run,
  current: { runId: run.runId, attemptId: run.attemptId, runEpoch: run.runEpoch },
  claimedRunId: undefined,
  preparing: undefined,
  lastResult: undefined,
});

/**
 * One live incarnation of a session (DESIGN §3): it rests `idle`, `suspended` (a run waits for an
 * answer) or `detached` (a run is left resumable); an execute goes `preparing` (the log is read)
 * → `executing` (the run machine as its child) → `finalizing` (the attempt is settled: the open
 * run read back, its result published) → rest again. `fenced` once another writer took over;
 * `closing` → `closed`. A cancel or detach that comes while an attempt is prepared waits in
 * context and goes with the attempt when it starts; during the run it goes to the run.
 * @example
 * const actor = createActor(sessionMachine.provide({ actors: { run, settleAttempt, closeSession } }), { input })
 */
export const sessionMachine = setup({
  types: {
    input: {} as SessionInput,
    context: {} as SessionContext,
    events: {} as SessionEvent,
    emitted: {} as SessionEmitted,
  },
  actors: {
    run: runMachine,
    prepareAttempt: fromPromise<PrepareOutput, PrepareInput>(notProvided('prepareAttempt')),
    settleAttempt: fromPromise<SettleOutput, { result: ExecutionResult }>(notProvided('settleAttempt')),
    closeSession: fromPromise<void, void>(async () => {}),
  },
  guards: {
    restsFenced: ({ context }) => context.fenced,
    restsSuspended: ({ context }) => context.rest === 'suspended',
    restsDetached: ({ context }) => context.rest === 'detached',
    settledFenced: ({ event }) => (event as unknown as { output: SettleOutput }).output.rest === 'fenced',
    preparedRun: ({ event }) => 'run' in (event as unknown as { output: PrepareOutput }).output,
  },
  actions: {
    startAttempt: assign(({ event }) => attemptOf((event as Extract<SessionEvent, { type: 'START' }>).run)),
    startPrepared: assign(({ event }) => attemptOf(((event as unknown as { output: PrepareOutput }).output as { run: RunInput }).run)),
    answerPrepared: emit(({ context, event }) => ({
      type: 'attempt.answered' as const,
      token: context.preparing!,
      result: ((event as unknown as { output: PrepareOutput }).output as { result: ExecutionResult }).result,
    })),
    refusePrepared: emit(({ context, event }) => ({
      type: 'attempt.refused' as const,
      token: context.preparing!,
      error: (event as { error?: unknown }).error,
    })),
    clearPreparation: assign({
      claimedRunId: undefined,
      preparing: undefined,
      cancelPending: undefined,
      cancelRecordId: undefined,
      detachPending: false,
    }),
    keepResult: assign({
      lastResult: ({ event }) => (event as unknown as { output: ExecutionResult }).output,
      cancelPending: undefined,
      cancelRecordId: undefined,
      detachPending: false,
    }),
    keepCrash: assign({
      cancelPending: undefined,
      cancelRecordId: undefined,
      detachPending: false,
      lastResult: ({ context, event }) =>
        notRunResult(
          { runId: context.current?.runId ?? 'unknown', attemptId: context.current?.attemptId ?? 'unknown' },
          'failed',
          `run machine crashed: ` +
            `${((event as { error?: unknown }).error as Error)?.message ?? String((event as { error?: unknown }).error)}`,
        ),
    }),
    restAt: assign({
      rest: ({ event }) => (event as unknown as { output: SettleOutput }).output.rest as SessionRest,
      current: undefined,
      attempt: undefined,
    }),
    announceRest: emit(({ context }) => ({ type: 'session.rested' as const, result: context.lastResult })),
    forget: assign({ lastResult: undefined }),
  },
}).createMachine({
  id: 'session',
  context: ({ input }) => ({
    sessionId: input.sessionId,
    sessionInstanceId: input.sessionInstanceId,
    writerEpoch: input.writerEpoch,
    rest: input.openRun ?? 'idle',
    current: undefined,
    attempt: undefined,
    preparing: undefined,
    fenced: false,
    claimedRunId: undefined,
    cancelPending: undefined,
    cancelRecordId: undefined,
    detachPending: false,
    lastResult: undefined,
  }),
  initial: 'resting',
  on: { CLOSE: '.closing' },
  states: {
    /** Decides which resting state the session is in (transient). */
    resting: {
      always: [
        { guard: 'restsFenced', target: 'fenced' },
        { guard: 'restsSuspended', target: 'suspended' },
        { guard: 'restsDetached', target: 'detached' },
        { target: 'idle' },
      ],
    },
    idle: {
      entry: ['announceRest', 'forget'],
      on: { PREPARE: 'preparing', START: { target: 'executing', actions: 'startAttempt' } },
    },
    suspended: {
      entry: ['announceRest', 'forget'],
      on: { PREPARE: 'preparing', START: { target: 'executing', actions: 'startAttempt' } },
    },
    detached: {
      entry: ['announceRest', 'forget'],
      on: { PREPARE: 'preparing', START: { target: 'executing', actions: 'startAttempt' } },
    },
    preparing: {
      entry: assign(({ event }) => {
        const e = event as Extract<SessionEvent, { type: 'PREPARE' }>;
        return { claimedRunId: e.claimedRunId, preparing: e.token };
      }),
      invoke: {
        src: 'prepareAttempt',
        input: ({ event }) => {
          const e = event as Extract<SessionEvent, { type: 'PREPARE' }>;
          return { token: e.token, request: e.request };
        },
        onDone: [
          { guard: 'preparedRun', target: 'executing', actions: 'startPrepared' },
          // answered from the log, refused or not startable: the session rests where it was
          { target: 'resting', actions: ['answerPrepared', 'clearPreparation'] },
        ],
        onError: { target: 'resting', actions: ['refusePrepared', 'clearPreparation'] },
      },
      on: {
        CANCEL: {
          actions: assign({
            cancelPending: ({ event }) => event.reason ?? 'requestCancel',
            cancelRecordId: ({ event, context }) => event.recordId ?? context.cancelRecordId,
          }),
        },
        DETACH: { actions: assign({ detachPending: true }) },
      },
    },
    executing: {
      invoke: {
        id: 'run',
        src: 'run',
        // what was asked for while the attempt was prepared goes with it
        input: ({ context }) => {
          const run = context.attempt!;
          return {
            ...run,
            // (recorded with its run/start, so that its next attempt honours it too — unless the log holds one
            // and this cancel asks for no record of its own)
            ...(context.cancelPending !== undefined
              ? {
                  cancelRequested: true,
                  ...(run.cancelRequested && context.cancelRecordId === undefined ? {} : { cancelToRecord: context.cancelPending }),
                  ...(context.cancelRecordId !== undefined ? { cancelRecordId: context.cancelRecordId } : {}),
                }
              : {}),
            ...(context.detachPending ? { detachRequested: true } : {}),
          };
        },
        onDone: { target: 'finalizing', actions: 'keepResult' },
        onError: { target: 'finalizing', actions: 'keepCrash' },
      },
      on: {
        STOP_AFTER_ROUND: { actions: sendTo('run', { type: 'STOP_AFTER_ROUND' }) },
        CANCEL: { actions: sendTo('run', ({ event }) => event) },
        DETACH: { actions: sendTo('run', { type: 'DETACH' }) },
      },
    },
    finalizing: {
      invoke: {
        src: 'settleAttempt',
        input: ({ context }) => ({ result: context.lastResult! }),
        onDone: [
          { guard: 'settledFenced', target: 'fenced', actions: assign({ current: undefined, attempt: undefined }) },
          { target: 'resting', actions: 'restAt' },
        ],
        // settling never fails the session: what is open is read again before the next attempt
        onError: { target: 'resting', actions: assign({ current: undefined, attempt: undefined }) },
      },
    },
    /** Another writer took over: an execute is still answered (its recorded result, or `fenced`), nothing runs. */
    fenced: { entry: ['announceRest', 'forget', assign({ fenced: true })], on: { PREPARE: 'preparing' } },
    closing: {
      invoke: { src: 'closeSession', onDone: 'closed', onError: 'closed' },
      on: { CLOSE: {} },
    },
    closed: { type: 'final' },
  },
});
