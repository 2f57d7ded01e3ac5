import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, setup, waitFor, type AnyActorLogic } from 'xstate';
import { promiseActor } from '../../src/actors/promise-actor.js';

/** A parent that invokes `phase` and records how it ended. */
function parentOf(phase: AnyActorLogic) {
  return setup({ actors: { phase }, types: { context: {} as { output?: unknown; error?: unknown } } }).createMachine({
    context: {},
    initial: 'running',
    states: {
      running: {
        invoke: {
          src: 'phase',
          input: 20,
          onDone: { target: 'done', actions: ({ context, event }) => void (context.output = event.output) },
          onError: { target: 'failed', actions: ({ context, event }) => void (context.error = event.error) },
        },
        on: { LEAVE: 'left' },
      },
      left: {},
      done: { type: 'final' },
      failed: { type: 'final' },
    },
  });
}

/** Both logics, so that every rule is checked against XState's own fromPromise too. */
type Make = (creator: (args: { input: number; signal: AbortSignal }) => PromiseLike<number> | number) => AnyActorLogic;
const makers: [string, Make][] = [
  ['promiseActor', (creator) => promiseActor<number, number>(creator)],
  ['fromPromise', (creator) => fromPromise<number, number>(async (args) => creator(args))],
];

describe('a phase actor keeps the fromPromise contract', () => {
  for (const [name, make] of makers) {
    it(`${name}: the invoking state's onDone gets the resolved value`, async () => {
      const actor = createActor(parentOf(make(async ({ input }) => input + 1))).start();
      const snap = await waitFor(actor, (s) => s.status === 'done');
      expect(snap.value).toBe('done');
      expect(snap.context.output).toBe(21);
    });

    it(`${name}: a rejection reaches onError with its error`, async () => {
      const boom = new Error('boom');
      const actor = createActor(parentOf(make(async () => Promise.reject(boom)))).start();
      const snap = await waitFor(actor, (s) => s.status === 'done');
      expect(snap.value).toBe('failed');
      expect(snap.context.error).toBe(boom);
    });

    it(`${name}: a creator that throws at once reaches onError`, async () => {
      const boom = new Error('sync boom');
      const actor = createActor(
        parentOf(
          make(() => {
            throw boom;
          }),
        ),
      ).start();
      const snap = await waitFor(actor, (s) => s.status === 'done');
      expect(snap.value).toBe('failed');
      expect(snap.context.error).toBe(boom);
    });

    it(`${name}: leaving the state aborts the signal the creator holds, and a late answer is dropped`, async () => {
      let signal: AbortSignal | undefined;
      let answer!: (v: number) => void;
      const actor = createActor(
        parentOf(
          make(({ signal: s }) => {
            signal = s;
            return new Promise<number>((r) => (answer = r));
          }),
        ),
      ).start();
      expect(signal?.aborted).toBe(false);
      actor.send({ type: 'LEAVE' });
      expect(signal?.aborted).toBe(true);
      answer(5);
      await new Promise((r) => setTimeout(r, 0));
      expect(actor.getSnapshot().value).toBe('left');
      expect(actor.getSnapshot().context.output).toBeUndefined();
    });
  }

  it('promiseActor: a signal first read after the actor stopped is already aborted', async () => {
    let later: (() => AbortSignal) | undefined;
    const actor = createActor(
      parentOf(
        promiseActor((args) => {
          later = () => args.signal;
          return new Promise<number>(() => {});
        }),
      ),
    ).start();
    actor.send({ type: 'LEAVE' });
    expect(later!().aborted).toBe(true);
    expect(later!()).toBe(later!());
  });

  it('promiseActor: every read of signal gives the one signal, also after the actor settled', async () => {
    let args: { signal: AbortSignal } | undefined;
    const actor = createActor(
      parentOf(
        promiseActor(async (a) => {
          args = a;
          return a.signal.aborted ? 0 : 1;
        }),
      ),
    ).start();
    const first = args!.signal;
    await waitFor(actor, (s) => s.status === 'done');
    expect(args!.signal).toBe(first);
    expect(first.aborted).toBe(false);
  });

  it('promiseActor: a creator that never reads its signal gets no AbortController', async () => {
    const made: unknown[] = [];
    const Original = globalThis.AbortController;
    globalThis.AbortController = class extends Original {
      constructor() {
        super();
        made.push(this);
      }
    };
    try {
      const actor = createActor(parentOf(promiseActor(async ({ input }: { input: number }) => input))).start();
      await waitFor(actor, (s) => s.status === 'done');
      expect(made).toHaveLength(0);
      const withSignal = createActor(parentOf(promiseActor(async ({ signal }) => (signal.aborted ? 0 : 1)))).start();
      await waitFor(withSignal, (s) => s.status === 'done');
      expect(made).toHaveLength(1);
    } finally {
      globalThis.AbortController = Original;
    }
  });
});
