import { assign, emit, sendTo, setup } from 'xstate';
import { notRunResult, type ExecutionResult } from '../contracts/requests.js';
import { runMachine, type RunInput } from './run.machine.js';

export interface SessionInput {
  sessionId: string;
  sessionInstanceId: string;
  writerEpoch: number;
}

export interface SessionContext extends SessionInput {
  activeRunId?: string;
  activeAttemptId?: string;
  lastResult?: ExecutionResult;
}

export type SessionEvent =
  | { type: 'EXECUTE'; run: RunInput }
  | { type: 'STOP_AFTER_ROUND' }
  | { type: 'CANCEL'; reason?: string }
  | { type: 'DETACH' }
  | { type: 'CLOSE' };

export type SessionEmitted = { type: 'run.finished'; result: ExecutionResult };

/**
 * One live incarnation of a session (DESIGN §3): `idle → executing → idle`, `fenced` once another
 * writer took over, `closed`. It invokes one run machine per attempt and emits `run.finished`.
 * @example
 * const actor = createActor(sessionMachine.provide({ actors: { run: runMachine.provide(...) } }), { input })
 */
export const sessionMachine = setup({
  types: {
    input: {} as SessionInput,
    context: {} as SessionContext,
    events: {} as SessionEvent,
    emitted: {} as SessionEmitted,
  },
  actors: { run: runMachine },
  guards: {
    wasFenced: ({ event }) => (event as unknown as { output: ExecutionResult }).output.status === 'fenced',
  },
}).createMachine({
  id: 'session',
  context: ({ input }) => ({ ...input }),
  initial: 'idle',
  states: {
    idle: {
      on: {
        EXECUTE: {
          target: 'executing',
          actions: assign(({ event }) => ({ activeRunId: event.run.runId, activeAttemptId: event.run.attemptId })),
        },
        CLOSE: 'closed',
      },
    },
    executing: {
      invoke: {
        id: 'run',
        src: 'run',
        input: ({ event }) => (event as Extract<SessionEvent, { type: 'EXECUTE' }>).run,
        onDone: [
          {
            guard: 'wasFenced',
            target: 'fenced',
            actions: [assign({ lastResult: ({ event }) => event.output, activeRunId: undefined, activeAttemptId: undefined }), emit(({ event }) => ({ type: 'run.finished' as const, result: event.output }))],
          },
          {
            target: 'idle',
            actions: [assign({ lastResult: ({ event }) => event.output, activeRunId: undefined, activeAttemptId: undefined }), emit(({ event }) => ({ type: 'run.finished' as const, result: event.output }))],
          },
        ],
        onError: {
          target: 'idle',
          actions: [
            // emit first: it names the attempt, which the assign then clears
            emit(({ context, event }) => ({
              type: 'run.finished' as const,
              result: notRunResult(
                { runId: context.activeRunId ?? 'unknown', attemptId: context.activeAttemptId ?? 'unknown' },
                'failed',
                `run machine crashed: ${(event.error as Error)?.message ?? String(event.error)}`,
              ),
            })),
            assign({ activeRunId: undefined, activeAttemptId: undefined }),
          ],
        },
      },
      on: {
        STOP_AFTER_ROUND: { actions: sendTo('run', { type: 'STOP_AFTER_ROUND' }) },
        CANCEL: { actions: sendTo('run', ({ event }) => event) },
        DETACH: { actions: sendTo('run', { type: 'DETACH' }) },
        CLOSE: 'closed',
      },
    },
    fenced: {
      on: {
        EXECUTE: {
          actions: emit(({ event }) => ({
            type: 'run.finished' as const,
            result: notRunResult(event.run, 'fenced', 'this session instance was fenced: another writer attached to the session; open it again'),
          })),
        },
        CLOSE: 'closed',
      },
    },
    closed: { type: 'final' },
  },
});
