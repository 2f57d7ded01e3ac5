import { fromPromise } from 'xstate';
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

/** One batch as the run invokes it. */
export type BatchRequest = ToolBatchInput;

/**
 * A stand-in for the toolBatch actor the run invokes per step: its output is `run`'s results, and
 * it errors like the real batch when `run` throws.
 */
export function fakeBatch(run: (batch: BatchRequest) => Promise<ToolBatchOutput> | ToolBatchOutput) {
  return fromPromise<ToolBatchOutput, ToolBatchInput>(async ({ input }) => run(input)) as unknown as typeof toolBatchMachine;
}
