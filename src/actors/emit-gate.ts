import type { LiveEvent } from '../streams/envelopes.js';
import type { SessionServices } from './session-services.js';

/**
 * The step's live events, held back while the previous step's results are landing and published
 * in order once they are durable (after those results' own envelopes), or dropped if that commit
 * failed: the step then fails with its error, and nothing of this call was shown.
 */
export function emitGate(env: SessionServices): { emit: SessionServices['emit']; landed: Promise<void> } {
  const landing = env.writer.landing();
  if (landing === undefined) return { emit: (e, logSeq) => env.emit(e, logSeq), landed: Promise.resolve() };
  let held: [LiveEvent, number | undefined][] | null = [];
  let dropped = false;
  const landed = landing.then(
    async () => {
      // one at a time, each after the subscribers' flush of the one before (a microtask), as the
      // call made them: a listener that keeps up is not handed them as one burst
      const q = held!;
      for (const [e, logSeq] of q) {
        env.emit(e, logSeq);
        await Promise.resolve();
      }
      held = null;
    },
    (e: unknown) => {
      held = null;
      dropped = true;
      throw e;
    },
  );
  landed.catch(() => {}); // callModel awaits it on every path past this point
  return {
    emit: (e, logSeq) => {
      if (held) held.push([e, logSeq]);
      else if (!dropped) env.emit(e, logSeq);
    },
    landed,
  };
}
