import { assign, enqueueActions, setup, stopChild } from 'xstate';
import type { ToolCallIntent, ToolCallOutput } from '../contracts/calls.js';
import { mayStillRun, overlaps } from '../contracts/locks.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { AnyTool } from '../tools/define-tool.js';
import { NO_TOOLS } from '../actors/session-services.js';
import { callActor, skippedOutput, type BatchBudget, type ToolCallInput, type ToolCallReply } from '../actors/tool-call.js';
import type { CallControl } from '../tools/call-runtime.js';

export interface ToolBatchInput {
  runId: string;
  maxParallel: number;
  /** The calls of one assistant message whose intents are committed, in the model's order. */
  calls: ToolCallIntent[];
  /** The run was cancelled before the batch started: no call starts. */
  cancelled?: boolean;
  /** The attempt's tools, by name (absent: none): each call runs its own. */
  tools?: ReadonlyMap<string, AnyTool>;
  /** The batch's place and what the run's usage budgets left when it started: its sub-agents spend from it. */
  budget?: BatchBudget;
  /** The run's stop and detach requests made before the batch started (each call is told). */
  control?: CallControl[];
}

/** Where each call of the batch stands; indexes follow `calls` (call ids come from the model). */
export type CallState = 'queued' | 'running' | 'done';

export interface ToolBatchContext {
  runId: string;
  maxParallel: number;
  calls: ToolCallIntent[];
  states: CallState[];
  /** Each call's outcome once it has one (null before). */
  results: (ToolCallOutput | null)[];
  /** Set when an exclusive call failed: every call not yet started is skipped. */
  truncatedBy: string | undefined;
  cancelled: boolean;
  /** The attempt's tools, by name (absent: none). */
  tools?: ReadonlyMap<string, AnyTool>;
  budget?: BatchBudget;
  /** The run's stop and detach requests so far: told to every running call, and to each call that starts later. */
  control?: CallControl[];
}

export type ToolBatchEvent =
  | ToolCallReply
  | { type: 'CANCEL'; reason?: string }
  | { type: 'CONTROL'; request: CallControl }
  | { type: 'batch.error'; error: unknown };
export type ToolBatchOutput = ToolCallOutput[];

const failed = (o: ToolOutcome) => o.kind !== 'completed' || o.isError;

/**
 * Which queued calls may start now (DESIGN §4 item 5): exclusive calls run alone and in order, as
 * barriers; parallel calls run concurrently up to the cap; calls naming the same resources never
 * overlap. Nothing starts once the batch is cancelled or truncated.
 */
export function runnableCalls(ctx: ToolBatchContext): number[] {
  if (ctx.truncatedBy !== undefined || ctx.cancelled) return [];
  const running: number[] = [];
  ctx.states.forEach((s, i) => s === 'running' && running.push(i));
  if (running.some((i) => ctx.calls[i]!.mode === 'exclusive')) return [];
  const out: number[] = [];
  let slots = ctx.maxParallel - running.length;
  for (let i = 0; i < ctx.calls.length; i++) {
    if (ctx.states[i] !== 'queued') continue;
    const c = ctx.calls[i]!;
    if (c.mode === 'exclusive') {
      // a barrier: only when everything before it is finished and nothing else runs
      if (running.length === 0 && out.length === 0 && ctx.states.slice(0, i).every((s) => s === 'done')) out.push(i);
      break;
    }
    if (slots <= 0) break;
    const busy = [...running, ...out].flatMap((j) => ctx.calls[j]!.resources);
    if (c.resources.length > 0 && overlaps(c.resources, busy)) continue;
    out.push(i);
    slots--;
  }
  return out;
}

/**
 * The batch once call `index` reported `out`: it no longer runs; a failed exclusive call
 * truncates. A call given up on while it may still run keeps its resources locked: the calls not
 * yet started that name one of them are skipped, never run beside it.
 */
export function recorded(context: ToolBatchContext, index: number, out: ToolCallOutput): ToolBatchContext {
  const call = context.calls[index]!;
  const states = context.states.slice();
  const results = context.results.slice();
  states[index] = 'done';
  results[index] = out;
  if (call.resources.length > 0 && mayStillRun(out.outcome)) {
    context.calls.forEach((c, i) => {
      if (states[i] !== 'queued' || !overlaps(c.resources, call.resources)) return;
      const held = c.resources.filter((r) => call.resources.includes(r));
      states[i] = 'done';
      results[i] = skippedOutput(c, `not run: ${held.join(', ')} stay locked by call ${call.callId}, which may still be running`);
    });
  }
  // an exclusive call left unsettled (its child waits) is a barrier still: the calls after it do not run now
  const truncatedBy =
    context.truncatedBy ?? (call.mode === 'exclusive' && (failed(out.outcome) || out.unsettled) ? call.callId : undefined);
  return { ...context, states, results, truncatedBy };
}

/**
 * Every call's outcome in call order; a call that never started is skipped, saying why — but an
 * agent call of a cancelled batch is left unsettled: its child may have run in an earlier life, and
 * the run's end answers it once the cancel has reached that child (docs/agents.md, "Control").
 */
function outputOf(c: ToolBatchContext): ToolBatchOutput {
  return c.calls.map(
    (call, i) =>
      c.results[i] ??
      (c.cancelled && call.resumable ? notResumed(call) : undefined) ??
      skippedOutput(
        call,
        c.cancelled && c.truncatedBy === undefined
          ? 'not run: the run was cancelled before the call started'
          : c.results[c.calls.findIndex((x) => x.callId === c.truncatedBy)]?.unsettled
            ? `not run: the exclusive call ${c.truncatedBy} before it has no result yet (its agent waits)`
            : `not run: the exclusive call ${c.truncatedBy} failed before it`,
      ),
  );
}

/** An agent call a cancel kept from resuming its child: unsettled, for the run's end to answer. */
const notResumed = (call: ToolCallIntent): ToolCallOutput => ({
  ...skippedOutput(call, 'not run: the run was cancelled before the call started'),
  unsettled: {},
});

const nothingRuns = (c: ToolBatchContext) => !c.states.includes('running');
const isExclusive = (c: ToolBatchContext, i: number) => c.calls[i]!.mode === 'exclusive';

type Spawn = (src: 'toolCall', options: { id: string; input: ToolCallInput }) => unknown;

/** One tool call's actor id: its place in the batch (never a model-made call id). */
const callActorId = (index: number) => `call-${index}`;

/**
 * A run's tool batch (DESIGN §4 item 5), invoked once per step with its calls: it spawns one
 * tool-call actor per call as the scheduling rules allow and ends with every call's outcome in
 * call order. Its states show the schedule: `runningParallel` (parallel calls run, more may
 * start), `awaitingBarrier` (an exclusive call is next; the parallel calls before it finish
 * first), `runningExclusive` (one exclusive call runs alone), `draining` (cancelled or truncated:
 * nothing new starts, running calls finish), `done`.
 * @example
 * runMachine.provide({ actors: { toolBatch: toolBatchMachine.provide({ actors: { toolCall: toolCallActor(services) } }) } })
 */
export const toolBatchMachine = setup({
  types: {
    input: {} as ToolBatchInput,
    context: {} as ToolBatchContext,
    events: {} as ToolBatchEvent,
    output: {} as ToolBatchOutput,
  },
  actors: {
    toolCall: callActor(async () => {
      throw new Error('toolCall actor not provided');
    }),
  },
  actions: {
    /** Spawns the calls that may start now. */
    launch: assign(({ context, spawn }) => {
      const start = runnableCalls(context);
      if (start.length === 0) return {};
      const states = context.states.slice();
      for (const i of start) {
        states[i] = 'running';
        (spawn as Spawn)('toolCall', {
          id: callActorId(i),
          input: {
            call: context.calls[i]!,
            tool: (context.tools ?? NO_TOOLS.tools).get(context.calls[i]!.name)!,
            runId: context.runId,
            index: i,
            ...(context.budget ? { budget: context.budget } : {}),
            ...(context.control?.length ? { control: context.control } : {}),
          },
        });
      }
      return { states };
    }),
    /** Records a finished call (its actor is stopped first). */
    record: assign(({ context, event }) => {
      const e = event as Extract<ToolBatchEvent, { type: 'call.done' }>;
      return recorded(context, e.index, e.output);
    }),
    stopCall: stopChild(({ event }) => callActorId((event as Extract<ToolBatchEvent, { type: 'call.done' }>).index)),
    /** The run was cancelled: running calls are told (their tools' signals abort), queued ones never start. */
    cancel: enqueueActions(({ context, event, enqueue }) => {
      enqueue.assign({ cancelled: true });
      const reason = (event as { reason?: string }).reason ?? 'cancelled';
      context.states.forEach((s, i) => s === 'running' && enqueue.sendTo(callActorId(i), { type: 'CANCEL', reason }));
    }),
    /** A stop or detach of the run: kept for calls that start later, and told to the running ones. */
    control: enqueueActions(({ context, event, enqueue }) => {
      const request = (event as Extract<ToolBatchEvent, { type: 'CONTROL' }>).request;
      const made = context.control ?? [];
      if (made.includes(request)) return;
      enqueue.assign({ control: [...made, request] });
      context.states.forEach((s, i) => s === 'running' && enqueue.sendTo(callActorId(i), { type: 'CONTROL', request }));
    }),
    /**
     * A call actor that failed outside its tool (tool errors are outcomes): the batch errors, after
     * stopping the calls still running (their tools are aborted: an erroring actor does not stop its
     * children by itself). Raised in a macrostep of its own: the stops have run by then.
     */
    fail: enqueueActions(({ context, event, enqueue }) => {
      context.states.forEach((s, i) => s === 'running' && enqueue.stopChild(callActorId(i)));
      enqueue.raise({ type: 'batch.error', error: (event as Extract<ToolBatchEvent, { type: 'call.failed' }>).error }, { delay: 0 });
    }),
  },
  guards: {
    settled: ({ context }) =>
      nothingRuns(context) && (context.truncatedBy !== undefined || context.cancelled || context.states.every((s) => s === 'done')),
    stopping: ({ context }) => context.truncatedBy !== undefined || context.cancelled,
    /** What starts now (or runs) is an exclusive call. */
    exclusiveNext: ({ context }) => {
      const start = runnableCalls(context);
      return start.some((i) => isExclusive(context, i)) || context.states.some((s, i) => s === 'running' && isExclusive(context, i));
    },
    /** Parallel calls run and the next queued call is exclusive: it waits for them. */
    barrierAhead: ({ context }) => {
      const next = context.states.indexOf('queued');
      return next >= 0 && isExclusive(context, next) && runnableCalls(context).length === 0;
    },
  },
}).createMachine({
  id: 'toolBatch',
  context: ({ input }) => ({
    runId: input.runId,
    maxParallel: input.maxParallel,
    calls: input.calls,
    states: input.calls.map(() => 'queued' as const),
    results: input.calls.map(() => null),
    truncatedBy: undefined,
    cancelled: input.cancelled ?? false,
    ...(input.tools ? { tools: input.tools } : {}),
    ...(input.budget ? { budget: input.budget } : {}),
    control: input.control ?? [],
  }),
  initial: 'scheduling',
  on: {
    'call.failed': { actions: 'fail' },
    CONTROL: { actions: 'control' },
    'batch.error': {
      actions: ({ event }) => {
        throw event.error;
      },
    },
  },
  states: {
    /** Decides what runs next (a transient state: it never waits). */
    scheduling: {
      always: [
        { guard: 'settled', target: 'done' },
        { guard: 'stopping', target: 'draining' },
        { guard: 'exclusiveNext', target: 'runningExclusive', actions: 'launch' },
        { guard: 'barrierAhead', target: 'awaitingBarrier' },
        { target: 'runningParallel', actions: 'launch' },
      ],
    },
    runningParallel: {
      on: {
        'call.done': { target: 'scheduling', actions: ['stopCall', 'record'] },
        CANCEL: { target: 'draining', actions: 'cancel' },
      },
    },
    awaitingBarrier: {
      on: {
        'call.done': { target: 'scheduling', actions: ['stopCall', 'record'] },
        CANCEL: { target: 'draining', actions: 'cancel' },
      },
    },
    runningExclusive: {
      on: {
        'call.done': { target: 'scheduling', actions: ['stopCall', 'record'] },
        CANCEL: { target: 'draining', actions: 'cancel' },
      },
    },
    draining: {
      always: { guard: 'settled', target: 'done' },
      on: {
        'call.done': { actions: ['stopCall', 'record'] },
        CANCEL: { actions: 'cancel' },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => outputOf(context),
});
