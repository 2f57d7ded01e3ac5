import { fromCallback } from 'xstate';
import { CancelledError } from '../contracts/errors.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { StartRunOutput } from '../machines/run.machine.js';
import type { CommitResultsInput, CommitResultsOutput } from './commit-results.js';
import type { FinalizeInput, FinalizeOutput } from './finalize.js';
import type { ModelStepInput, ModelStepOutput } from './model-step.js';
import type { EndRunInput, StartRunInput } from './run-lifecycle.js';

/** One effect of a run; `signal` aborts when the run actor stops. */
type Op<I, O> = (input: I, signal: AbortSignal) => Promise<O>;

/**
 * The effects a run performs between its states, each an async operation of one session's
 * environment. They run in ONE long-lived actor per run (the run's `effects` child), reached by
 * events: a step creates no actor for them (an actor costs far more than an event, see
 * docs/architecture.md).
 */
export interface RunEffectOps {
  startRun: Op<StartRunInput, StartRunOutput>;
  modelStep: Op<ModelStepInput, ModelStepOutput & { cost?: string }>;
  commitResults: Op<CommitResultsInput, CommitResultsOutput>;
  finalize: Op<FinalizeInput, FinalizeOutput>;
  endRun: Op<EndRunInput, ExecutionResult>;
}

export type EffectName = keyof RunEffectOps;
type InputOf<K extends EffectName> = Parameters<RunEffectOps[K]>[0];
type OutputOf<K extends EffectName> = Awaited<ReturnType<RunEffectOps[K]>>;

/** What the run machine sends to its effects actor. */
export type EffectRequest = { [K in EffectName]: { type: 'effect'; op: K; input: InputOf<K> } }[EffectName];

/** Builds a request for `op`. */
export const effect = <K extends EffectName>(op: K, input: InputOf<K>): EffectRequest => ({ type: 'effect', op, input }) as EffectRequest;

/** What the effects actor sends back: `<op>.done` with the output or `<op>.error` with the error. */
export type EffectReply =
  | { [K in EffectName]: { type: `${K}.done`; output: OutputOf<K> } }[EffectName]
  | { [K in EffectName]: { type: `${K}.error`; error: unknown } }[EffectName];

/**
 * The run's effects actor: runs each requested operation and replies to the run with its outcome.
 * One request is in flight at a time (the run waits for each reply); stopping the run aborts it.
 * @example
 * runMachine.provide({ actors: { effects: runEffectsActor(ops), toolBatch } })
 */
export const runEffectsActor = (ops: RunEffectOps) =>
  fromCallback<EffectRequest>(({ sendBack, receive }) => {
    const ac = new AbortController();
    receive((req) => {
      const op = ops[req.op] as Op<unknown, unknown>;
      let pending: Promise<unknown>;
      try {
        pending = op(req.input, ac.signal);
      } catch (e) {
        pending = Promise.reject(e); // a sync throw is reported like a rejection
      }
      pending.then(
        (output) => {
          if (!ac.signal.aborted) sendBack({ type: `${req.op}.done`, output } as EffectReply);
        },
        (error: unknown) => {
          if (!ac.signal.aborted) sendBack({ type: `${req.op}.error`, error } as EffectReply);
        },
      );
    });
    return () => ac.abort(new CancelledError('the run actor stopped'));
  });
