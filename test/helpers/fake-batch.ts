import type { ToolCallIntent } from '../../src/contracts/calls.js';
import { assign, fromPromise, sendParent, setup } from 'xstate';
import type { toolBatchMachine, ToolBatchInput, ToolBatchOutput } from '../../src/machines/tool-batch.machine.js';
import type { RunInput } from '../../src/machines/run.machine.js';
import { LoopBudget } from '../../src/contracts/config.js';

/** A prompt attempt's run-machine input (run r1, attempt a1), with `over` on top. */
export const runInput = (over: Partial<RunInput> = {}): RunInput => ({
  runId: 'r1',
  attemptId: 'a1',
  runEpoch: 1,
  turn: 1,
  kind: 'prompt',
  messages: [{ role: 'user', content: 'hi' }],
  executionProfileFingerprint: 'f'.repeat(64),
  budget: LoopBudget.parse({}),
  maxProtocolCorrections: 2,
  maxParallelTools: 4,
  startedAt: Date.now(),
  ...over,
});

/** One batch as the run asks for it: the batch actor's input with the `batch.run` calls. */
export type BatchRequest = ToolBatchInput & { calls: ToolCallIntent[] };

/**
 * A stand-in for the long-lived toolBatch actor: answers each `batch.run` with `run`'s results
 * (`batch.done`), and errors like the real batch when `run` throws.
 */
export function fakeBatch(run: (batch: BatchRequest) => Promise<ToolBatchOutput> | ToolBatchOutput) {
  return setup({
    types: { input: {} as ToolBatchInput, context: {} as BatchRequest, events: {} as { type: 'batch.run'; calls: ToolCallIntent[] } },
    actors: { work: fromPromise<ToolBatchOutput, BatchRequest>(async ({ input }) => run(input)) },
  }).createMachine({
    context: ({ input }) => ({ ...input, calls: [] }),
    initial: 'idle',
    states: {
      idle: { on: { 'batch.run': { target: 'working', actions: assign({ calls: ({ event }) => event.calls }) } } },
      working: {
        invoke: {
          src: 'work',
          input: ({ context }) => context,
          onDone: { target: 'idle', actions: sendParent(({ event }) => ({ type: 'batch.done', results: event.output })) },
          onError: {
            actions: ({ event }) => {
              throw event.error;
            },
          },
        },
      },
    },
  }) as unknown as typeof toolBatchMachine;
}
