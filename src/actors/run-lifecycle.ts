import { fromPromise } from 'xstate';
import { isStaleWriterError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { RunEnv } from './run-env.js';

export interface StartRunInput {
  runId: string;
  attemptId: string;
  runEpoch: number;
  turn: number;
  kind: 'prompt' | 'respond' | 'continue' | 'follow_up';
  messages: Message[];
  executionProfileFingerprint: string;
}

export const runStartEventId = (runId: string, attemptId: string) => `run-start:${runId}:${attemptId}`;
export const runEndEventId = (runId: string, attemptId: string) => `run-end:${runId}:${attemptId}`;

/** The run's first commit point: `run/start` with the prompt's user messages. */
export const startRunActor = (env: RunEnv) =>
  fromPromise<number, StartRunInput>(async ({ input }) => {
    const at = { turn: input.turn, step: 0, attempt: input.runEpoch };
    env.writer.stage(
      'run/start',
      at,
      {
        runId: input.runId,
        attemptId: input.attemptId,
        runEpoch: input.runEpoch,
        kind: input.kind,
        executionProfileFingerprint: input.executionProfileFingerprint,
      },
      runStartEventId(input.runId, input.attemptId),
    );
    for (const m of input.messages) env.writer.stage('user/message', at, { message: m });
    const records = await env.writer.commit();
    env.emit({
      type: 'run_start',
      sessionInstanceId: env.sessionInstanceId,
      runId: input.runId,
      attemptId: input.attemptId,
      runEpoch: input.runEpoch,
      turn: input.turn,
    });
    return records[0]!.seq;
  });

export interface EndRunInput {
  turn: number;
  step: number;
  attempt: number;
  result: ExecutionResult;
}

/**
 * The run's closing commit: `run/end` (with the delivery outcome staged before it). A fenced
 * writer cannot commit: the result then says so (`checkpointCommitted: false`).
 */
export const endRunActor = (env: RunEnv) =>
  fromPromise<ExecutionResult, EndRunInput>(async ({ input }) => {
    const r = input.result;
    const at = { turn: input.turn, step: input.step, attempt: input.attempt };
    if (env.writer.fenced) {
      env.writer.discard();
      return { ...r, checkpointCommitted: false };
    }
    const storable = { ...r, error: r.error ? { kind: r.error.kind, message: r.error.message, cause: causeInfo(r.error.cause) } : undefined };
    env.writer.stage(
      'run/end',
      at,
      {
        runId: r.runId,
        attemptId: r.attemptId,
        status: r.status,
        outcome: r.outcome,
        usage: r.usage,
        ...(r.error ? { error: { message: r.error.message, code: r.error.kind } } : {}),
        result: JSON.parse(JSON.stringify(storable)) as Record<string, unknown>,
      },
      runEndEventId(r.runId, r.attemptId),
    );
    try {
      await env.writer.commit();
      return r;
    } catch (e) {
      env.writer.discard();
      if (isStaleWriterError(e)) {
        return { ...r, outcome: 'incomplete', status: 'fenced', error: { kind: 'inconsistent', message: e.message, cause: e }, checkpointCommitted: false };
      }
      return { ...r, checkpointCommitted: false, historyConsistent: false };
    }
  });

/** A JSON form of an error cause: its name, message and own scalar fields. */
export function causeInfo(cause: unknown): Record<string, unknown> | undefined {
  if (!cause || typeof cause !== 'object') return undefined;
  const out: Record<string, unknown> = { name: (cause as Error).name, message: (cause as Error).message };
  for (const [k, v] of Object.entries(cause)) if (['string', 'number', 'boolean'].includes(typeof v)) out[k] = v;
  return out;
}
