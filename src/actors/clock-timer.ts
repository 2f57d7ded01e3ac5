import type { AnyActorRef, PromiseActorLogic, PromiseSnapshot } from 'xstate';
import type { Clock } from '../contracts/clock.js';

const FIRE = 'actorloop.timer.fire';
const STOP = 'xstate.stop';

/** The clock's id of each running timer actor's timeout, for the stop to clear it. */
const pending = new WeakMap<AnyActorRef, unknown>();

/**
 * A timer on `clock`: resolves after `ms`, or once the clock reads `at` (never, with neither);
 * stopping the actor clears it.
 * The worker's polls, renewals, idle releases and waits are these, so a simulated clock drives them.
 * It settles as a promise actor would (done a microtask after the timeout fires), but keeps the
 * timeout's id instead of an AbortSignal: a held session starts and stops one at every wait, and
 * aborting a signal makes a DOMException (docs/performance.md, "The worker machine").
 * @example
 * setup({ actors: { wait: clockTimerActor(clock) } }) // invoke: { src: 'wait', input: { ms: 1000 }, onDone: 'next' }
 */
export const clockTimerActor = (clock: Clock): PromiseActorLogic<void, { ms?: number; at?: number }> =>
  ({
    config: clock,
    transition: (state, event, scope) => {
      if (state.status !== 'active') return state;
      if (event.type === FIRE) return { status: 'done', output: undefined, error: undefined, input: undefined };
      if (event.type !== STOP) return state;
      const id = pending.get(scope.self);
      if (id !== undefined) {
        pending.delete(scope.self);
        clock.clearTimeout(id);
      }
      return { status: 'stopped', output: undefined, error: undefined, input: undefined };
    },
    start: (state, { self }) => {
      if (state.status !== 'active') return;
      const { ms: after, at } = state.input ?? {};
      const ms = after ?? (at === undefined ? undefined : at - clock.now());
      if (ms === undefined) return;
      const fire = () => {
        pending.delete(self);
        if (self.getSnapshot().status === 'active') self.send({ type: FIRE });
      };
      pending.set(
        self,
        clock.setTimeout(() => queueMicrotask(fire), Math.max(0, ms)),
      );
    },
    getInitialSnapshot: (_scope, input) =>
      ({ status: 'active', output: undefined, error: undefined, input }) as PromiseSnapshot<void, typeof input>,
    getPersistedSnapshot: (snapshot) => snapshot,
    restoreSnapshot: (snapshot: any) => snapshot,
  }) as PromiseActorLogic<void, { ms?: number; at?: number }>;
