import { notProvided } from './not-provided.js';
import { assign, emit, fromPromise, sendTo, setup } from 'xstate';
import { notRunResult, type ExecutionResult } from '../contracts/requests.js';
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
  /** The runId a prompt being prepared has claimed (a follow-up may not take it meanwhile). */
  claimedRunId: string | undefined;
  /** A cancel or detach asked for while the attempt was being prepared: the attempt starts with it. */
  cancelPending: boolean;
  detachPending: boolean;
  /** The last attempt's result, until it is settled. */
  lastResult: ExecutionResult | undefined;
}

export type SessionEvent =
  /** An execute began preparing its attempt (reading the log). */
  | { type: 'PREPARE'; claimedRunId?: string }
  /** The attempt (or a follow-up's run) starts. */
  | { type: 'START'; run: RunInput }
  /** The attempt being prepared runs nothing (answered from the log, refused, closed). */
  | { type: 'ABANDON' }
  | { type: 'STOP_AFTER_ROUND' }
  | { type: 'CANCEL'; reason?: string }
  | { type: 'DETACH' }
  | { type: 'CLOSE' };

/** Emitted on reaching a resting state (or fenced): the facade answers the attempt and starts what waits. */
export type SessionEmitted = { type: 'session.rested'; result: ExecutionResult | undefined };

/** What the `settleAttempt` actor decides once an attempt ended: where the session rests now. */
export type SettleOutput = { rest: SessionRest | 'fenced' };

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
    settleAttempt: fromPromise<SettleOutput, { result: ExecutionResult }>(notProvided('settleAttempt')),
    closeSession: fromPromise<void, void>(async () => {}),
  },
  guards: {
    restsSuspended: ({ context }) => context.rest === 'suspended',
    restsDetached: ({ context }) => context.rest === 'detached',
    settledFenced: ({ event }) => (event as unknown as { output: SettleOutput }).output.rest === 'fenced',
  },
  actions: {
    startAttempt: assign(({ event }) => {
      const run = (event as Extract<SessionEvent, { type: 'START' }>).run;
      return {
        current: { runId: run.runId, attemptId: run.attemptId, runEpoch: run.runEpoch },
        claimedRunId: undefined,
        lastResult: undefined,
      };
    }),
    clearPreparation: assign({ claimedRunId: undefined, cancelPending: false, detachPending: false }),
    keepResult: assign({ lastResult: ({ event }) => (event as unknown as { output: ExecutionResult }).output, cancelPending: false, detachPending: false }),
    keepCrash: assign({
      cancelPending: false,
      detachPending: false,
      lastResult: ({ context, event }) =>
        notRunResult(
          { runId: context.current?.runId ?? 'unknown', attemptId: context.current?.attemptId ?? 'unknown' },
          'failed',
          `run machine crashed: ${((event as { error?: unknown }).error as Error)?.message ?? String((event as { error?: unknown }).error)}`,
        ),
    }),
    restAt: assign({ rest: ({ event }) => (event as unknown as { output: SettleOutput }).output.rest as SessionRest, current: undefined }),
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
    claimedRunId: undefined,
    cancelPending: false,
    detachPending: false,
    lastResult: undefined,
  }),
  initial: 'resting',
  on: { CLOSE: '.closing' },
  states: {
    /** Decides which resting state the session is in (transient). */
    resting: {
      always: [{ guard: 'restsSuspended', target: 'suspended' }, { guard: 'restsDetached', target: 'detached' }, { target: 'idle' }],
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
      entry: assign({ claimedRunId: ({ event }) => (event as Extract<SessionEvent, { type: 'PREPARE' }>).claimedRunId }),
      on: {
        START: { target: 'executing', actions: 'startAttempt' },
        ABANDON: { target: 'resting', actions: 'clearPreparation' },
        CANCEL: { actions: assign({ cancelPending: true }) },
        DETACH: { actions: assign({ detachPending: true }) },
      },
    },
    executing: {
      invoke: {
        id: 'run',
        src: 'run',
        // what was asked for while the attempt was prepared goes with it
        input: ({ event, context }) => {
          const run = (event as Extract<SessionEvent, { type: 'START' }>).run;
          return { ...run, ...(context.cancelPending ? { cancelRequested: true } : {}), ...(context.detachPending ? { detachRequested: true } : {}) };
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
          { guard: 'settledFenced', target: 'fenced', actions: assign({ current: undefined }) },
          { target: 'resting', actions: 'restAt' },
        ],
        // settling never fails the session: what is open is read again before the next attempt
        onError: { target: 'resting', actions: assign({ current: undefined }) },
      },
    },
    fenced: { entry: ['announceRest', 'forget'] },
    closing: {
      invoke: { src: 'closeSession', onDone: 'closed', onError: 'closed' },
      on: { CLOSE: {} },
    },
    closed: { type: 'final' },
  },
});
