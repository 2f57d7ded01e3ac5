import type { AnyActorRef, PromiseActorLogic, PromiseSnapshot } from 'xstate';
import type { Clock } from '../contracts/clock.js';

const FIRE = 'actorloop.timer.fire';
const STOP = 'xstate.stop';

/** The clock's id of each running timer actor's timeout, for the stop to clear it. */
const pending = new WeakMap<AnyActorRef, unknown>();

/**
 * A timer on `clock`: resolves after `ms`, or once the clock reads `at` (never, with neither);
 * stopping the actor clears it. With `until`, it is also done as soon as the promise `until`
 * gives for its input settles (the timer cleared then): a wait for something, bounded on the clock.
 * The worker's polls, renewals, idle releases and waits are these, so a simulated clock drives them.
 * It settles as a promise actor would (done a microtask after the timeout fires), but keeps the
 * timeout's id instead of an AbortSignal: a held session starts and stops one at every wait, and
 * aborting a signal makes a DOMException (docs/performance.md, "The worker machine").
 * @example
 * setup({ actors: { wait: clockTimerActor(clock) } }) // invoke: { src: 'wait', input: { ms: 1000 }, onDone: 'next' }
 */
export const clockTimerActor = <TInput extends { ms?: number; at?: number } = { ms?: number; at?: number }>(
  clock: Clock,
  until?: (input: TInput) => PromiseLike<unknown> | undefined,
): PromiseActorLogic<void, TInput> =>
  ({
    config: clock,
    transition: (state, event, scope) => {
      if (state.status !== 'active') return state;
      if (event.type === FIRE) return { status: 'done', output: undefined, error: undefined, input: undefined };
      if (event.type !== STOP) return state;
      clear(clock, scope.self);
      return { status: 'stopped', output: undefined, error: undefined, input: undefined };
    },
    start: (state, { self }) => {
      if (state.status !== 'active') return;
      const input = (state.input ?? {}) as TInput;
      const { ms: after, at } = input;
      const ms = after ?? (at === undefined ? undefined : at - clock.now());
      const fire = () => {
        clear(clock, self);
        if (self.getSnapshot().status === 'active') self.send({ type: FIRE });
      };
      if (ms !== undefined)
        pending.set(
          self,
          clock.setTimeout(() => queueMicrotask(fire), Math.max(0, ms)),
        );
      until?.(input)?.then(fire, fire);
    },
    getInitialSnapshot: (_scope, input) =>
      ({ status: 'active', output: undefined, error: undefined, input }) as PromiseSnapshot<void, TInput>,
    getPersistedSnapshot: (snapshot) => snapshot,
    restoreSnapshot: (snapshot: any) => snapshot,
  }) as PromiseActorLogic<void, TInput>;

/** Clears the running timeout of `self`, if it has one. */
function clear(clock: Clock, self: AnyActorRef): void {
  const id = pending.get(self);
  if (id === undefined) return;
  pending.delete(self);
  clock.clearTimeout(id);
}
