/**
 * bench/floor: what one tool step costs in XState before it does any work (docs/performance.md,
 * *The XState floor*). A step of actorloop's run machine invokes one named actor per phase
 * (DESIGN §3; issue 14): the model call, the intent commit, a tool-batch machine that spawns one
 * actor per call (here two: a parallel call, then an exclusive one), the results commit. The rows
 * run that shape with instant effects:
 *
 * - a plain async loop awaiting the same phases as functions (no actors);
 * - a minimal XState machine invoking the same actors per step, with `fromPromise` and with
 *   actorloop's `promiseActor` (lazy AbortController);
 * - actorloop's own run and tool-batch machines with instant fake effects ("machines alone",
 *   as in bench/loop).
 *
 * Rows are interleaved round by round in one process (every other round in reverse order), after
 * a warm-up; µs per step, median [min–max] over the rounds.
 */
import { assign, createActor, fromCallback, setup, waitFor } from 'xstate';
import { promiseActor } from '../src/actors/promise-actor.js';
import { machinesWithInstantEffects, viaFromPromise, type Promised } from './loop.js';
import { fmt, median, printTable } from './table.js';

const STEPS = Number(process.env.FLOOR_STEPS ?? 200);
const ROUNDS = Number(process.env.FLOOR_ROUNDS ?? 12);
const WARMUP = 4;

/** The plain loop: the phases as awaited functions, the two calls in order (parallel, exclusive). */
async function plainLoop(steps: number): Promise<void> {
  const phase = async (x: number) => x + 1;
  let n = 0;
  for (let i = 0; i < steps; i++) {
    n = await phase(n); // model call
    n = await phase(n); // intent commit
    n = await phase(n); // parallel call
    n = await phase(n); // exclusive call
    n = await phase(n); // results commit
  }
  if (n !== steps * 5) throw new Error('plain loop miscounted');
}

/** A tool batch as small as XState allows: spawns call 0, then call 1 once it reported. */
const minimalBatch = setup({
  types: { context: {} as { done: number }, events: {} as { type: 'call.done' } },
  actors: {
    call: fromCallback<{ type: 'CANCEL' }, number>(({ sendBack }) => {
      void Promise.resolve().then(() => sendBack({ type: 'call.done' }));
    }),
  },
}).createMachine({
  context: { done: 0 },
  initial: 'parallel',
  states: {
    parallel: {
      entry: assign({ done: 0 }),
      invoke: { src: 'call', input: 0 },
      on: { 'call.done': { target: 'exclusive', actions: assign({ done: ({ context }) => context.done + 1 }) } },
    },
    exclusive: {
      invoke: { src: 'call', input: 1 },
      on: { 'call.done': { target: 'done', actions: assign({ done: ({ context }) => context.done + 1 }) } },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.done,
});

/** A run machine as small as XState allows, with one actor per phase as actorloop's step. */
function minimalRun(promised: Promised) {
  return setup({
    types: { context: {} as { step: number; steps: number }, input: {} as { steps: number } },
    actors: {
      callModel: promised(async ({ input }: { input: number }) => input),
      commitIntent: promised(async () => 2),
      toolBatch: minimalBatch,
      commitResults: promised(async () => 2),
    },
    actions: { nextStep: assign({ step: ({ context }) => context.step + 1 }) },
    guards: { lastStep: ({ context }) => context.step >= context.steps },
  }).createMachine({
    context: ({ input }) => ({ step: 0, steps: input.steps }),
    initial: 'callingModel',
    states: {
      callingModel: {
        invoke: {
          src: 'callModel',
          input: ({ context }: { context: { step: number } }) => context.step,
          onDone: [{ guard: 'lastStep', target: 'done' }, { target: 'committingIntent' }],
        },
      },
      committingIntent: { invoke: { src: 'commitIntent', onDone: 'runningTools' } },
      runningTools: { invoke: { src: 'toolBatch', onDone: 'committingResults' } },
      committingResults: { invoke: { src: 'commitResults', onDone: { target: 'callingModel', actions: 'nextStep' } } },
      done: { type: 'final' },
    },
  });
}

async function runMinimal(machine: ReturnType<typeof minimalRun>, steps: number): Promise<void> {
  const actor = createActor(machine, { input: { steps } }).start();
  await waitFor(actor, (s) => s.status === 'done', { timeout: 600_000 });
}

export async function benchFloor(): Promise<void> {
  const viaPromiseActor: Promised = (fn) => promiseActor(fn as never);
  const minimalFrom = minimalRun(viaFromPromise);
  const minimalLean = minimalRun(viaPromiseActor);
  const oursFrom = machinesWithInstantEffects(viaFromPromise);
  const oursLean = machinesWithInstantEffects(viaPromiseActor);
  const rows: [string, (steps: number) => Promise<void>][] = [
    ['plain async loop: the 5 phases as awaited functions', plainLoop],
    ['minimal XState machine, 6 actors a step (fromPromise)', (s) => runMinimal(minimalFrom, s)],
    ['minimal XState machine, 6 actors a step (promiseActor)', (s) => runMinimal(minimalLean, s)],
    ["actorloop's run + toolBatch machines, instant effects (fromPromise)", oursFrom],
    ["actorloop's run + toolBatch machines, instant effects (promiseActor, as shipped)", oursLean],
  ];
  const samples = rows.map(() => [] as number[]);
  for (let round = 0; round < WARMUP + ROUNDS; round++) {
    // every other round in reverse order, so that no row always runs after the same one
    const order = round % 2 === 0 ? rows.map((_, i) => i) : rows.map((_, i) => rows.length - 1 - i);
    for (const i of order) {
      const run = rows[i]![1];
      const t0 = performance.now();
      await run(STEPS);
      const us = ((performance.now() - t0) * 1000) / STEPS;
      if (round >= WARMUP) samples[i]!.push(us);
    }
  }
  const minimal = median(samples[2]!);
  printTable(
    ['row (a tool step: model call, intent commit, tool batch with 2 calls, results commit)', 'µs/step', 'min–max', 'vs minimal XState'],
    rows.map(([label], i) => {
      const s = samples[i]!;
      return [label, fmt(median(s), 1), `${fmt(Math.min(...s), 1)}–${fmt(Math.max(...s), 1)}`, `${fmt(median(s) / minimal, 2)}×`];
    }),
  );
  console.log(
    `${STEPS} steps a run, ${ROUNDS} rounds after ${WARMUP}, rows interleaved (every other round reversed); median [min–max] over the rounds.`,
  );
  console.log('XState rows: per step 4 invoked actors (3 promise actors and the batch machine) and 2 spawned call actors.');
}
