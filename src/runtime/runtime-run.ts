import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import type { ExecutionResult, PromptMessage } from '../contracts/requests.js';
import type { Envelope } from '../streams/envelopes.js';
import type { ExecutionSession } from './execution-session.js';
import type { RunHandle } from './run-handle.js';
import type { DeepPartial, RunOptions, TypedResult } from './run-options.js';

/** `runtime.run`'s options: the run's output schema, and the new session's id (made when left out). */
export interface RuntimeRunOptions<S extends z.ZodType = z.ZodType> extends RunOptions<S> {
  sessionId?: string;
}

/** `runtime.run`'s handle: the run's, with the session it runs on. */
export type SessionRunHandle<T = unknown> = RunHandle<T> & { readonly sessionId: string };

/**
 * `runtime.run`: opens a fresh session, runs `message` as its first prompt and closes the session
 * when the run's attempt ends (a suspended run waits in the log: open the session again to answer
 * it). The handle is returned at once, with its ids (`newId`: the runtime's `ids.runId`, as
 * `session.run` makes them); its streams and result wait for the session to open.
 */
export function runOnFreshSession(
  open: (sessionId: string) => Promise<ExecutionSession>,
  message: PromptMessage,
  options: RuntimeRunOptions = {},
  newId: () => string,
): SessionRunHandle {
  const { sessionId = randomUUID(), ...runOptions } = options;
  const runId = newId();
  const attemptId = newId();
  const started = open(sessionId).then((session) => {
    let handle;
    try {
      handle = session.run({ kind: 'prompt', runId, attemptId, message }, runOptions);
    } catch (e) {
      // refused before it started (a ValidationError): the session opened for it closes
      void session.close().catch(() => undefined);
      throw e;
    }
    void handle.result.then(
      () => session.close(),
      () => session.close(),
    );
    return handle;
  });
  const result = started.then((h) => h.result as Promise<ExecutionResult>);
  result.catch(() => undefined); // read through `result`; an unread rejection is not unhandled
  return {
    sessionId,
    runId,
    attemptId,
    textStream: later(started, (h) => h.textStream),
    events: later<Envelope>(started, (h) => h.events),
    partialOutputStream: later<DeepPartial<unknown>>(started, (h) => h.partialOutputStream),
    result: result as Promise<TypedResult<unknown>>,
  };
}

/** An async iterable read from the handle once it exists (rejecting as the opening did). */
function later<T>(handle: Promise<RunHandle>, pick: (h: RunHandle) => AsyncIterable<unknown>): AsyncIterable<T> {
  return {
    async *[Symbol.asyncIterator]() {
      yield* pick(await handle) as AsyncIterable<T>;
    },
  };
}
