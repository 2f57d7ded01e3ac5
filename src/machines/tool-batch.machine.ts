import { assign, enqueueActions, sendParent, setup, stopChild } from 'xstate';
import { own, ownRecord, withEntry } from '../contracts/keyed.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { CallDescr } from '../actors/model-step.js';
import { callActor, skippedOutput, type ToolCallOutput, type ToolCallReply } from '../actors/tool-call.js';

export interface ToolBatchInput {
  runId: string;
  maxParallel: number;
}

export interface ToolBatchContext extends ToolBatchInput {
  /** The batch being run (between batches, the last one). */
  calls: CallDescr[];
  /** Call ids started, in start order. */
  started: string[];
  running: string[];
  /** Outcomes by call id (a call id is the model's: read with `own`, never `results[id]`). */
  results: Record<string, ToolCallOutput>;
  /** Set when an exclusive call failed: every call not yet started is skipped. */
  truncatedBy?: string;
}

/** `batch.run` starts a batch; the batch answers its parent with `batch.done`. */
export type ToolBatchEvent = { type: 'batch.run'; calls: CallDescr[] } | ToolCallReply | { type: 'batch.error'; error: unknown };
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
  const running = ctx.running.map((id) => ctx.calls.find((c) => c.callId === id)!);
  if (running.some((c) => c.mode === 'exclusive')) return [];
  const out: CallDescr[] = [];
  let slots = ctx.maxParallel - running.length;
  for (let i = 0; i < ctx.calls.length; i++) {
    const c = ctx.calls[i]!;
    if (ctx.started.includes(c.callId) || own(ctx.results, c.callId)) continue;
    if (c.mode === 'exclusive') {
      // a barrier: only when everything before it is finished and nothing else runs
      if (running.length === 0 && out.length === 0 && allFinishedBefore(ctx, i)) out.push(c);
      break;
    }
    if (slots <= 0) break;
    if (c.resources.length > 0 && overlaps(c.resources, [...running, ...out].flatMap((r) => r.resources))) continue;
    out.push(c);
    slots--;
  }
  return out;
}

function allFinishedBefore(ctx: ToolBatchContext, i: number): boolean {
  for (let j = 0; j < i; j++) if (!own(ctx.results, ctx.calls[j]!.callId)) return false;
  return true;
}

const failed = (o: ToolOutcome) => o.kind !== 'completed' || o.isError;

/** An outcome after which the call may still be running: its resources stay locked. */
const mayStillRun = (o: ToolOutcome) => o.kind === 'uncertain-hanging' || (o.kind === 'cancelled' && !o.settled);

/**
 * The batch once `out` is recorded: its call no longer runs; a failed exclusive call truncates.
 * A call given up on while it may still run (uncertain-hanging, or cancelled unsettled) keeps its
 * resources locked (DESIGN §4 item 5): the calls of the batch not yet started that name one of
 * them are skipped, never run beside it.
 */
function recorded(context: ToolBatchContext, out: ToolCallOutput): ToolBatchContext {
  const call = context.calls.find((c) => c.callId === out.callId)!;
  let results = withEntry(context.results, out.callId, out);
  if (call.resources.length > 0 && mayStillRun(out.outcome)) {
    for (const c of context.calls) {
      if (own(results, c.callId) || context.started.includes(c.callId) || !overlaps(c.resources, call.resources)) continue;
      const held = c.resources.filter((r) => call.resources.includes(r));
      results = withEntry(results, c.callId, skippedOutput(c, `not run: ${held.join(', ')} stay locked by call ${call.callId}, which may still be running`));
    }
  }
  return {
    ...context,
    results,
    running: context.running.filter((id) => id !== out.callId),
    truncatedBy: context.truncatedBy ?? (call.mode === 'exclusive' && failed(out.outcome) ? call.callId : undefined),
  };
}

/** Every call has an outcome (or the batch was truncated) and nothing runs. */
const allSettled = (c: ToolBatchContext) => c.running.length === 0 && (c.truncatedBy !== undefined || c.calls.every((call) => own(c.results, call.callId)));

let memo: { context: ToolBatchContext; out: ToolCallOutput; next: ToolBatchContext; start: CallDescr[] } | undefined;

/**
 * The batch after `out` is recorded and the calls that may start then. The `call.done` guard and
 * the action it picks ask for the same (context, out): computed once (a one-entry memo keyed by
 * identity; both are immutable).
 */
function afterCall(context: ToolBatchContext, out: ToolCallOutput): { next: ToolBatchContext; start: CallDescr[] } {
  if (memo?.context === context && memo.out === out) return memo;
  const next = recorded(context, out);
  memo = { context, out, next, start: runnableCalls(next) };
  return memo;
}

/** True when the call that reported `out` was the batch's last: nothing more may start. */
function settles(context: ToolBatchContext, out: ToolCallOutput): boolean {
  const { next, start } = afterCall(context, out);
  return start.length === 0 && allSettled(next);
}

/** Every call's outcome in call order, skipped ones included. */
function outputOf(context: ToolBatchContext): ToolBatchOutput {
  return context.calls.map(
    (c) =>
      own(context.results, c.callId) ?? skippedOutput(c, `not run: the exclusive call ${context.truncatedBy} failed before it`),
  );
}

/** A call's actor id: prefixed, so that no call id is read as a property of XState's children object. */
const callChildId = (callId: string) => `call:${callId}`;

type CallDone = Extract<ToolBatchEvent, { type: 'call.done' }>;
type Spawn = (src: 'toolCall', options: { id: string; input: { call: CallDescr; runId: string } }) => unknown;

/**
 * Spawns the calls of `next` that may start now and returns the context with them running.
 * Spawning inside the `assign` costs one snapshot update for both (a step's XState cost is mostly
 * the snapshot copies its actions make, see docs/architecture.md).
 */
function launched(next: ToolBatchContext, spawn: Spawn, start = runnableCalls(next)): ToolBatchContext {
  if (start.length === 0) return next;
  const ids = start.map((c) => c.callId);
  for (const call of start) spawn('toolCall', { id: callChildId(call.callId), input: { call, runId: next.runId } });
  return { ...next, started: [...next.started, ...ids], running: [...next.running, ...ids] };
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
    /** Starts a batch: spawns the calls that may start at once. */
    start: assign(({ context, event, spawn }) => {
      const calls = (event as Extract<ToolBatchEvent, { type: 'batch.run' }>).calls;
      return launched({ ...context, calls, started: [], running: [], results: ownRecord(), truncatedBy: undefined }, spawn as Spawn);
    }),
    /** Records a finished call (its actor is stopped first) and spawns what may start now. */
    advance: assign(({ context, event, spawn }) => {
      const { next, start } = afterCall(context, (event as CallDone).output);
      return launched(next, spawn as Spawn, start);
    }),
    stopCall: stopChild(({ event }) => callChildId((event as CallDone).output.callId)),
    /** Answers the batch, with the outcome of the call that just finished. */
    report: sendParent(({ context, event }): ToolBatchDone => ({ type: 'batch.done', results: outputOf(afterCall(context, (event as CallDone).output).next) })),
  },
  guards: {
    settles: ({ context, event }) => settles(context, (event as CallDone).output),
  },
}).createMachine({
  id: 'toolBatch',
  context: ({ input }) => ({ ...input, calls: [], started: [], running: [], results: ownRecord(), truncatedBy: undefined }),
  initial: 'idle',
  states: {
    idle: {
      on: {
        'batch.run': [
          { guard: ({ event }) => event.calls.length === 0, actions: sendParent((): ToolBatchDone => ({ type: 'batch.done', results: [] })) },
          { target: 'running', actions: 'start' },
        ],
      },
    },
    running: {
      on: {
        // one transition per finished call: the last one answers the batch (no eventless check)
        'call.done': [
          { guard: 'settles', target: 'idle', actions: ['stopCall', 'report'] },
          { actions: ['stopCall', 'advance'] },
        ],
        // a call actor that failed outside its tool (tool errors are outcomes): the batch errors,
        // after stopping the calls still running (their tools are aborted: an erroring actor does
        // not stop its children by itself)
        'call.failed': {
          actions: enqueueActions(({ context, event, enqueue }) => {
            for (const id of context.running) enqueue.stopChild(callChildId(id));
            enqueue.raise({ type: 'batch.error', error: event.error }, { delay: 0 });
          }),
        },
        // raised in a macrostep of its own: the stops above have run by then (XState defers a
        // stop to the end of its macrostep, and drops what is deferred if an action throws)
        'batch.error': {
          actions: ({ event }) => {
            throw event.error;
          },
        },
      },
    },
  },
});
