import type { z } from 'zod';
import type { Observable } from 'rxjs';
import { outputSpec, withOutput } from '../actors/final-output.js';
import type { OpenInternals } from '../actors/worker-services.js';
import type { InboxEntry, InboxReceipt, ServeOptions, WaitForResultOptions } from '../contracts/inbox.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import { lmdbStore } from '../persistence/lmdb-store.js';
import type { Envelope } from '../streams/envelopes.js';
import type { ExecutionSession } from './execution-session.js';
import { followKillSwitch } from './kill-switch.js';
import { openSession, type SessionOpening } from './open-session.js';
import { OpenSessions } from './open-sessions.js';
import { resolveRuntimeOptions, type RuntimeOptions } from './options.js';
import { RateLimiter } from './rate-limiter.js';
import { SharedRateLimiter } from './shared-rate-limiter.js';
import { serve, type ServeHandle } from './serve.js';
import { sessionPrefix } from './services.js';
import { sessionInboxes, submitToOpen, workOf } from './submit.js';
import { runtimeToolSet } from './tool-set.js';
import { resolveTracing } from './tracing-options.js';
import { waitForResult } from './wait-for-result.js';

export interface Runtime<TOut = unknown> {
  readonly store: EventStore;
  /** sha256 hex of the canonical execution profile (model id, prompts, tool catalog, config, budget). */
  readonly executionProfileFingerprint: string;
  /** Attaches a writer (fencing any older one), writes `session/attached` and loads the surface. */
  openSession(sessionId: string): Promise<ExecutionSession<TOut>>;
  /**
   * The envelopes of every instance of `sessionId` open in this process, now and later (a web
   * stream's live deltas); nothing for a session that runs elsewhere.
   * @example
   * runtime.liveEnvelopes$('s1').subscribe((env) => env.event.type === 'message_delta' && process.stdout.write(env.event.text))
   */
  liveEnvelopes$(sessionId: string): Observable<Envelope>;
  /**
   * Records an entry in a session's inbox (docs/scale-out.md): durable when the receipt comes,
   * idempotent by its id, and never attaching a writer (a web handler never fences the worker
   * running the session). The session's owner applies it: a serving worker, or this runtime at
   * once if it has the session open.
   * @example
   * await runtime.submit('s1', { kind: 'input', inputId: 'i1', mode: 'follow_up', message: 'hi' })
   */
  submit(sessionId: string, entry: InboxEntry): Promise<InboxReceipt>;
  /**
   * Resolves with run `runId`'s result from the log (any process, after restarts): settled, or
   * suspended while it waits for an answer. Rejects with CancelledError when `signal` aborts.
   * @example
   * const result = await runtime.waitForResult('s1', 'i1', { signal: AbortSignal.timeout(60_000) })
   */
  waitForResult(sessionId: string, runId: string, options?: WaitForResultOptions): Promise<ExecutionResult>;
  /**
   * Serves sessions with work from the store (docs/scale-out.md): claims them under renewable
   * leases bound to their writer epoch, applies their inboxes, resumes interrupted runs.
   * @example
   * const worker = runtime.serve({ concurrency: 32, leaseMs: 15_000, signal })
   * worker.events$.subscribe((e) => console.log(e.type, e.sessionId))
   */
  serve(options?: ServeOptions): ServeHandle;
  /** Closes every session, then the store. */
  close(): Promise<void>;
}

/**
 * Creates a runtime (DESIGN §6). `store` defaults to `lmdbStore({ path: './.actorloop' })`.
 * @example
 * const runtime = createRuntime({ model: scriptedModel(['Hello!']), store: memoryStore() })
 * const session = await runtime.openSession('s1')
 * const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })
 * await runtime.close()
 */
export function createRuntime<S extends z.ZodType | undefined = undefined>(
  options: RuntimeOptions & { output?: S },
): Runtime<S extends z.ZodType ? z.output<S> : unknown>;
export function createRuntime(options: RuntimeOptions): Runtime {
  // every option checked before anything is opened
  const o = resolveRuntimeOptions(options);
  const runtimeOutput = o.output ? outputSpec(o.output, 'createRuntime: output') : undefined;
  const tracing = resolveTracing(o.tracing);
  const store = o.store ?? lmdbStore({ path: './.actorloop' });
  const toolSet = runtimeToolSet(o);
  const sessions = new OpenSessions();
  const killSwitch = followKillSwitch(o.killSwitch, sessions);
  const killed = () => killSwitch.killed;
  const limiter =
    o.rateLimits.length === 0
      ? undefined
      : o.rateLimitBuckets
        ? new SharedRateLimiter(o.rateLimits, o.rateLimitBuckets, o.clock)
        : new RateLimiter(o.rateLimits, o.clock);
  const opening: SessionOpening = {
    store,
    options: o,
    toolSet,
    runtimeOutput,
    prefix: sessionPrefix(o),
    tracing,
    sessions,
    killed,
    ...(limiter ? { limiter } : {}),
  };
  const open = (sessionId: string, internal?: OpenInternals) => openSession(opening, sessionId, internal);
  const inboxFor = sessionInboxes(store, o.clock);
  let closing: Promise<void> | undefined;
  return {
    store,
    get executionProfileFingerprint() {
      return withOutput(toolSet().fingerprint, runtimeOutput);
    },
    // a serving worker (serve, the simulator) passes its lease guard as a second, internal argument
    openSession: open,
    liveEnvelopes$: (sessionId) => sessions.envelopes$(sessionId),
    submit: (sessionId, entry) => submitToOpen(store, sessions, inboxFor, sessionId, entry),
    waitForResult: (sessionId, runId, options) => waitForResult(store, sessionId, runId, options),
    serve: (options) =>
      serve(
        {
          open,
          store,
          work: workOf(store, 'runtime.serve'),
          inboxFor,
          isKilled: killed,
          clock: o.clock,
          ...(o.inspect ? { inspect: o.inspect } : {}),
        },
        options,
      ),
    // every call resolves once the store is closed (a second call shares the first's work)
    close: () =>
      (closing ??= (async () => {
        killSwitch.unsubscribe();
        for (const s of sessions.closing()) await s.close();
        await store.close();
      })()),
  };
}
