import type { Clock } from '../contracts/clock.js';
import { promiseActor } from './promise-actor.js';

/**
 * A timer on `clock`: resolves after `ms`, or once the clock reads `at` (never, with neither);
 * stopping the actor clears it.
 * The worker's polls, renewals, idle releases and waits are these, so a simulated clock drives them.
 * @example
 * setup({ actors: { wait: clockTimerActor(clock) } }) // invoke: { src: 'wait', input: { ms: 1000 }, onDone: 'next' }
 */
export const clockTimerActor = (clock: Clock) =>
  promiseActor<void, { ms?: number; at?: number }>(
    ({ input, signal }) =>
      new Promise<void>((resolve) => {
        const ms = input.ms ?? (input.at === undefined ? undefined : input.at - clock.now());
        if (ms === undefined) return;
        const t = clock.setTimeout(resolve, Math.max(0, ms));
        signal.addEventListener('abort', () => clock.clearTimeout(t), { once: true });
      }),
  );
