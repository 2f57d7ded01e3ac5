import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { SessionIdInput } from '../contracts/ids.js';
import type { ModelProvider } from '../contracts/model.js';
import { RunRequest, type ExecutionResult, type IdentifiedRequest, type PromptMessage } from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import type { ContentLimits } from '../persistence/content-parts.js';
import type { Envelope } from '../streams/envelopes.js';
import type { ExecutionSession } from './execution-session.js';
import { assertRunRequest, type RunHandle } from './run-handle.js';
import { RunOptionsSchema, withRunOptions, type DeepPartial, type RunOptions, type TypedResult } from './run-options.js';

/** `runtime.run`'s options: the run's output schema, and the new session's id (made when left out). */
export interface RuntimeRunOptions<S extends z.ZodType = z.ZodType> extends RunOptions<S> {
  sessionId?: string;
}

const RuntimeRunOptionsSchema = RunOptionsSchema.extend({ sessionId: SessionIdInput.optional() });

/** What runtime.run checks its call against before it opens a session. */
export interface RunChecks {
  /** The runtime's `ids.runId` (or a random UUID). */
  newId: () => string;
  /** The default agent's model: the one a new session runs. */
  model: ModelProvider;
  contentLimits: ContentLimits;
}

/** `runtime.run`'s handle: the run's, with the session it runs on. */
export type SessionRunHandle<T = unknown> = RunHandle<T> & { readonly sessionId: string };

/**
 * `runtime.run`: checks the call (options, session id, message, the run's ids) as session.run
 * would, throwing a ValidationError before any session is opened; then opens a fresh session,
 * runs `message` as its first prompt and closes the session when the run's attempt ends (a
 * suspended run waits in the log: open the session again to answer it). The handle is returned at
 * once, with its ids (`newId`: the runtime's `ids.runId`, as `session.run` makes them); its streams
 * and result wait for the session to open.
 */
export function runOnFreshSession(
  open: (sessionId: string) => Promise<ExecutionSession>,
  message: PromptMessage,
  options: RuntimeRunOptions = {},
  checks: RunChecks,
): SessionRunHandle {
  const { sessionId: given, ...runOptions } = parseInput(RuntimeRunOptionsSchema, options, 'runtime.run: options');
  const sessionId = given ?? randomUUID();
  const request = { kind: 'prompt' as const, runId: checks.newId(), attemptId: checks.newId(), message };
  const checked = withRunOptions(parseInput(RunRequest, request, 'runtime.run') as IdentifiedRequest, runOptions, 'runtime.run');
  // a new session runs the default agent; a named one may run another, whose model session.run checks once it is open
  const model = given === undefined ? checks.model : undefined;
  assertRunRequest(checked, { sessionId, model, contentLimits: checks.contentLimits }, 'runtime.run');
  const { runId, attemptId } = request;
  const started = open(sessionId).then((session) => {
    let handle;
    try {
      handle = session.run(request, runOptions);
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
