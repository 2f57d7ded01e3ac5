/** A model call's wait for its rate limit ended by the run's stop after its round: nothing sent, the run ends stopped. */
export class StoppedWaiting extends Error {
  override readonly name = 'StoppedWaiting';
  constructor() {
    super('the run was asked to stop while its model call waited for a rate limit');
  }
}
export const isStoppedWaiting = (e: unknown): e is StoppedWaiting => e instanceof StoppedWaiting;

/**
 * A session's stop-after-round requests, as the waits for a rate limit follow them: `stop()` ends
 * every wait under way (their calls are not made; a call already sent finishes, as a stop lets it).
 * The session's run control calls it when it sends its running attempt the stop.
 */
export class WaitStops {
  private ac = new AbortController();

  /** Aborted when the running attempt is asked to stop (a wait starting later gets a fresh one). */
  get signal(): AbortSignal {
    return this.ac.signal;
  }

  stop(): void {
    const ac = this.ac;
    this.ac = new AbortController();
    ac.abort(new StoppedWaiting());
  }
}
