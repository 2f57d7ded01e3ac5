/**
 * Cheap abort plumbing for the per-step hot path. On Node 20 an AbortController (with its signal)
 * costs ≈ 3.5 µs to create and an EventTarget listener about 0.5 µs to add and remove; a step
 * made several of each (one controller per tool call, listeners on the run's long-lived signals).
 */

type Hook = (reason: unknown) => void;
const noop = () => {};

/** The callbacks waiting on each long-lived signal, and its one real 'abort' listener. */
const fanouts = new WeakMap<AbortSignal, { hooks: Set<Hook>; fire: () => void }>();

/**
 * Calls `hook(signal.reason)` once when `signal` aborts; returns the function that withdraws it.
 * Does nothing for a signal already aborted (callers check `aborted` first, as with
 * addEventListener). Every hook of a signal shares one listener, registered the first time and
 * kept for the next hook (the run's signals, on the hot path) — or, with `release`, removed once
 * no hook is left (an app's signal, which must not keep a listener of ours: waitForResult).
 * @example
 * const off = onAbort(env.cancelSignal, (reason) => call.abort(reason)); try { … } finally { off() }
 */
export function onAbort(signal: AbortSignal, hook: Hook, options?: { release: true }): () => void {
  if (signal.aborted) return noop;
  let entry = fanouts.get(signal);
  if (!entry) {
    const hooks = new Set<Hook>();
    const fire = () => {
      fanouts.delete(signal);
      const all = [...hooks];
      hooks.clear();
      for (const h of all) h(signal.reason);
    };
    fanouts.set(signal, (entry = { hooks, fire }));
    signal.addEventListener('abort', fire, { once: true });
  }
  const mine = entry;
  mine.hooks.add(hook);
  if (!options?.release) return () => void mine.hooks.delete(hook);
  return () => {
    mine.hooks.delete(hook);
    if (mine.hooks.size > 0 || fanouts.get(signal) !== mine) return;
    fanouts.delete(signal);
    signal.removeEventListener('abort', mine.fire);
  };
}

/**
 * The abort state of one tool call. Its `AbortSignal` is made only when `signal` is read (a tool
 * that never looks at `ctx.signal` costs no AbortController); a signal made after the abort is
 * made aborted, with the same reason. Shaped like an AbortController (`signal`, `abort`).
 * @example
 * const ac = new CallAbort(); ac.onAbort(() => armGraceTimer()); ac.abort(new Error('timed out'))
 */
export class CallAbort {
  aborted = false;
  reason: unknown = undefined;
  private controller: AbortController | undefined;
  private hooks: (() => void)[] | undefined;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** Aborts once (later calls do nothing): the signal if made, then the hooks, in order. */
  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason === undefined ? new DOMException('This operation was aborted', 'AbortError') : reason;
    this.controller?.abort(this.reason);
    const hooks = this.hooks;
    this.hooks = undefined;
    if (hooks) for (const h of hooks) h();
  }

  /** Runs `hook` once on abort (at once if already aborted); returns the function that withdraws it. */
  onAbort(hook: () => void): () => void {
    if (this.aborted) {
      hook();
      return noop;
    }
    (this.hooks ??= []).push(hook);
    return () => {
      const i = this.hooks?.indexOf(hook) ?? -1;
      if (i >= 0) this.hooks!.splice(i, 1);
    };
  }
}
