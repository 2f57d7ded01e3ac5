import { assign, enqueueActions, sendParent, setup } from 'xstate';
import type { ToolOutcome } from '../contracts/tools.js';
import type { CallDescr } from '../actors/model-step.js';
import { callActor, type ToolCallOutput, type ToolCallReply } from '../actors/tool-call.js';

export interface ToolBatchInput {
  runId: string;
  maxParallel: number;
}

export interface ToolBatchContext extends ToolBatchInput {
  /** The batch being run (empty between batches). */
  calls: CallDescr[];
  /** Call ids started, in start order. */
  started: string[];
  running: string[];
  results: Record<string, ToolCallOutput>;
  /** Set when an exclusive call failed: every call not yet started is skipped. */
  truncatedBy?: string;
}

/** `batch.run` starts a batch; the batch answers its parent with `batch.done`. */
export type ToolBatchEvent = { type: 'batch.run'; calls: CallDescr[] } | ToolCallReply;
export type ToolBatchOutput = ToolCallOutput[];
export type ToolBatchDone = { type: 'batch.done'; results: ToolBatchOutput };

const overlaps = (a: string[], b: string[]) => a.some((r) => b.includes(r));

/**
 * Which calls may start now (DESIGN §4 item 5): exclusive calls run alone and in order, as
 * barriers; parallel calls run concurrently up to the cap; calls naming the same resources never
 * overlap.
 */
export function runnableCalls(ctx: ToolBatchContext): CallDescr[] {
  if (ctx.truncatedBy) return [];
  const byId = new Map(ctx.calls.map((c) => [c.callId, c]));
  const running = ctx.running.map((id) => byId.get(id)!);
  if (running.some((c) => c.mode === 'exclusive')) return [];
  const out: CallDescr[] = [];
  let slots = ctx.maxParallel - running.length;
  for (const c of ctx.calls) {
    if (ctx.started.includes(c.callId)) continue;
    if (c.mode === 'exclusive') {
      // a barrier: only when everything before it is finished and nothing else runs
      if (running.length === 0 && out.length === 0 && ctx.calls.slice(0, ctx.calls.indexOf(c)).every((p) => ctx.results[p.callId])) out.push(c);
      break;
    }
    if (slots <= 0) break;
    if (overlaps(c.resources, [...running, ...out].flatMap((r) => r.resources))) continue;
    out.push(c);
    slots--;
  }
  return out;
}

const failed = (o: ToolOutcome) => o.kind !== 'completed' || o.isError;

/** Every call's outcome in call order, skipped ones included. */
function outputOf(context: ToolBatchContext): ToolBatchOutput {
  return context.calls.map(
    (c) =>
      context.results[c.callId] ?? {
        callId: c.callId,
        name: c.name,
        outcome: { kind: 'skipped', reason: `not run: the exclusive call ${context.truncatedBy} failed before it` },
        startedAt: Date.now(),
        endedAt: Date.now(),
      },
  );
}

/**
 * A run's tool batches, one after another: one long-lived actor per run. `batch.run` starts a
 * batch; it spawns one tool-call actor per call as the scheduling rules allow and answers its
 * parent with `batch.done` and every call's outcome in call order (skipped ones included).
 * @example
 * runMachine.provide({ actors: { toolBatch: toolBatchMachine.provide({ actors: { toolCall: toolCallActor(env) } }) } })
 */
export const toolBatchMachine = setup({
  types: {
    input: {} as ToolBatchInput,
    context: {} as ToolBatchContext,
    events: {} as ToolBatchEvent,
  },
  actors: {
    toolCall: callActor(async () => {
      throw new Error('toolCall actor not provided');
    }),
  },
  actions: {
    launch: enqueueActions(({ context, enqueue }) => {
      const next = runnableCalls(context);
      if (next.length === 0) return;
      for (const call of next) enqueue.spawnChild('toolCall', { id: call.callId, input: { call, runId: context.runId } });
      enqueue.assign({
        started: [...context.started, ...next.map((c) => c.callId)],
        running: [...context.running, ...next.map((c) => c.callId)],
      });
    }),
    record: enqueueActions(({ context, event, enqueue }) => {
      const out = (event as Extract<ToolBatchEvent, { type: 'call.done' }>).output;
      const call = context.calls.find((c) => c.callId === out.callId)!;
      const truncatedBy = context.truncatedBy ?? (call.mode === 'exclusive' && failed(out.outcome) ? call.callId : undefined);
      enqueue.stopChild(out.callId);
      enqueue.assign({
        results: { ...context.results, [out.callId]: out },
        running: context.running.filter((id) => id !== out.callId),
        ...(truncatedBy ? { truncatedBy } : {}),
      });
    }),
    report: sendParent(({ context }): ToolBatchDone => ({ type: 'batch.done', results: outputOf(context) })),
  },
  guards: {
    allSettled: ({ context }) =>
      context.running.length === 0 && (context.truncatedBy !== undefined || context.calls.every((c) => context.results[c.callId])),
  },
}).createMachine({
  id: 'toolBatch',
  context: ({ input }) => ({ ...input, calls: [], started: [], running: [], results: {} }),
  initial: 'idle',
  states: {
    idle: {
      on: {
        'batch.run': {
          target: 'running',
          actions: assign(({ event }) => ({ calls: event.calls, started: [], running: [], results: {}, truncatedBy: undefined })),
        },
      },
    },
    running: {
      entry: 'launch',
      always: { guard: 'allSettled', target: 'idle', actions: 'report' },
      on: {
        'call.done': { actions: ['record', 'launch'] },
        // a call actor that failed outside its tool (tool errors are outcomes): the batch errors
        'call.failed': {
          actions: ({ event }) => {
            throw event.error;
          },
        },
      },
    },
  },
});
