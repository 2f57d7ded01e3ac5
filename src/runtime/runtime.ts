import { randomUUID } from 'node:crypto';
import { newRunId } from '../contracts/clock.js';
import type { z } from 'zod';
import type { Observable } from 'rxjs';
import type { OpenInternals } from '../actors/worker-services.js';
import type { InboxEntry, InboxReceipt, ServeOptions, WaitForResultOptions } from '../contracts/inbox.js';
import type { ExecutionResult, PromptMessage } from '../contracts/requests.js';
import type { ResumeMode } from './auto-resume.js';
import { openOptionsOf, type OpenSessionOptions } from './open-options.js';
import type { Agent } from '../tools/define-agent.js';
import { runOnFreshSession, type RuntimeRunOptions, type SessionRunHandle } from './runtime-run.js';
import type { EventStore } from '../persistence/event-store.js';
import { lmdbStore } from '../persistence/lmdb-store.js';
import type { Envelope } from '../streams/envelopes.js';
import type { ExecutionSession } from './execution-session.js';
import { followKillSwitch } from './kill-switch.js';
import { openSession, type SessionOpening } from './open-session.js';
import { childSessionRefusal, recordedParent } from './recorded-agent.js';
import { OpenSessions } from './open-sessions.js';
import { assertModel, resolveRuntimeOptions, type RuntimeOptions } from './options.js';
import { bucketsOf, RateLimiter, SHARED_TOKEN_HEADROOM } from './rate-limiter.js';
import { sharedBuckets } from './rate-buckets.js';
import { serve, type ServeHandle } from './serve.js';
import { promptEntry, sessionInboxes, submitToOpen, workOf } from './submit.js';
import { askUserTool } from '../tools/ask-user.js';
import { agentRegistry } from './agent-registry.js';
import { askedAgent } from './recorded-agent.js';
import { boundAgentTool, type ChildHost } from './agent-calls.js';
import { runChildrenOf } from './child-cancel.js';
import type { BudgetPool } from '../actors/budget-pool.js';
import { resolveTracing } from './tracing-options.js';
import { waitForResult } from './wait-for-result.js';
import { isServed, LiveSessions, type ServedInternals } from './live-sessions.js';
import { StoreClosedError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import { SessionIdInput } from '../contracts/ids.js';

export interface Runtime<TOut = unknown> {
  readonly store: EventStore;
  /** sha256 hex of the canonical execution profile (model id, prompts, tool catalog, config, budget). */
  readonly executionProfileFingerprint: string;
  /**
   * Attaches a writer, writes `session/attached` and loads the surface; without an id, a new
   * session's. The session this runtime has open already is returned as it is (its writer closes
   * with the last opener's `close`). A session another live process writes is refused with
   * SessionHeldError unless `takeover: true` (which fences that writer); a second runtime of this
   * process takes the session over (docs/guarantees.md, "One live writer"). A run left
   * interrupted is continued when the next run starts on it (`resume: 'manual'` refuses that run
   * instead: docs/recovery.md). `agent` (a value or a name) is the agent a new session runs; a
   * session with history runs the one its log records (docs/agents.md); an agent the runtime
   * does not define: UnknownAgentError. A live session asked for with another `agent` or
   * `resume` than its first opener's is refused (ValidationError); an option left out agrees.
   * @example
   * const session = await runtime.openSession('support-42')
   */
  openSession(sessionId?: string, options?: OpenSessionOptions): Promise<ExecutionSession<TOut>>;
  /**
   * Runs `message` as the first prompt of a fresh session (`options.sessionId`, or a new id) and
   * returns its handle at once, with the session's id; the session closes when the attempt ends.
   * A bad call (options, session id, message) throws a ValidationError before any session is
   * opened: nothing is written. (With a `sessionId`, media its agent's model does not take are
   * refused once the session is open: the handle's `result` rejects.)
   * @example
   * const run = runtime.run('What is 2 + 2?')
   * for await (const text of run.textStream) process.stdout.write(text)
   */
  run<S extends z.ZodType>(message: PromptMessage, options: RuntimeRunOptions<S> & { output: S }): SessionRunHandle<z.output<S>>;
  run(message: PromptMessage, options?: RuntimeRunOptions): SessionRunHandle<TOut>;
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
   * once if it has the session open. A bare string is a prompt: a follow-up input with a new id
   * (the receipt's `entryId`, its run's id). An entry its owner could never apply — an input
   * whose id names a run of the session, run ids too long for the store — is refused
   * (ValidationError) before it is stored. Needs no model.
   * @example
   * const { entryId } = await runtime.submit('s1', 'hi')
   * const result = await runtime.waitForResult('s1', entryId)
   */
  submit(sessionId: string, entry: InboxEntry | string): Promise<InboxReceipt>;
  /**
   * Resolves with run `runId`'s result from the log (any process, after restarts): settled, or
   * suspended while it waits for an answer. Rejects with InputRejectedError when the inbox input
   * of that id was rejected when applied (it started no run), CancelledError when `signal` aborts.
   * @example
   * const result = await runtime.waitForResult('s1', 'i1', { signal: AbortSignal.timeout(60_000) })
   */
  waitForResult(sessionId: string, runId: string, options?: WaitForResultOptions): Promise<ExecutionResult>;
  /**
   * Serves sessions with work from the store (docs/scale-out.md): claims them under renewable
   * leases bound to their writer epoch, applies their inboxes, resumes interrupted runs. Throws
   * for bad options or no model (ValidationError) and after `close()` (StoreClosedError); a worker
   * whose registration in the store fails reports an `error`, then `stopped`, never `started`.
   * @example
   * const worker = runtime.serve({ concurrency: 32, leaseMs: 15_000, signal })
   * worker.events$.subscribe((e) => console.log(e.type, e.sessionId))
   */
  serve(options?: ServeOptions): ServeHandle;
  /** Closes every session, then ends every worker `serve` started (its sessions released, it unregistered), then closes the store. */
  close(): Promise<void>;
}

/**
 * Creates a runtime (DESIGN §6). `store` defaults to `lmdbStore({ path: './.actorloop' })`; a
 * runtime that only submits and reads needs no model when its store is given.
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
  const tracing = resolveTracing(o.tracing);
  const store = o.store ?? lmdbStore({ path: './.actorloop' });
  // every agent's tools (a live list's as it is now) and the execution profile of an attempt starting now
  // an agentTool's calls open their child sessions in this runtime (held by it as any session it opens)
  // the pool each running child session spends from (its parent batch's), by child session id
  const childPools = new Map<string, BudgetPool>();
  const childHost: ChildHost = {
    store,
    pools: childPools,
    // the parent's writer owns its children: a child a crashed or fenced writer left held is taken over
    open: (id, agent, parent, { lost, callActor }) =>
      live.open(id, true, () =>
        openSession(opening, id, {
          ...(agent !== undefined ? { agent } : {}),
          parent,
          resume: 'auto',
          ...(callActor ? { callActor } : {}),
          ...(lost ? { guard: () => lost() } : {}),
        }),
      ),
  };
  const agents = agentRegistry(o, o.agents, o.askUser ? [askUserTool] : [], (t, mark) => boundAgentTool(t, mark, childHost));
  const sessions = new OpenSessions();
  const killSwitch = followKillSwitch(o.killSwitch, sessions);
  const killed = () => killSwitch.killed;
  const limiter =
    o.rateLimits.length === 0
      ? undefined
      : o.rateLimitBuckets
        ? new RateLimiter(
            o.rateLimits,
            o.clock,
            sharedBuckets(o.rateLimitBuckets, bucketsOf(o.rateLimits, SHARED_TOKEN_HEADROOM)),
            SHARED_TOKEN_HEADROOM,
          )
        : new RateLimiter(o.rateLimits, o.clock);
  const opening: SessionOpening = {
    store,
    options: o,
    agents,
    tracing,
    sessions,
    killed,
    childPools,
    children: runChildrenOf(childHost),
    ...(limiter ? { limiter } : {}),
  };
  const live = new LiveSessions(store, () => sessions.closed);
  const attach = (sessionId: string, internal: OpenInternals | undefined, resume: ResumeMode, agent?: Agent | string) =>
    openSession(opening, sessionId, { ...internal, resume, ...(agent !== undefined ? { agent } : {}) });
  // a serving worker's open: a writer of its own under its lease guard, recorded as held by the worker
  const openServed = (sessionId: string, internals: OpenInternals) =>
    live.openServed(sessionId, internals.workerId, () => attach(sessionId, internals, 'served'));
  // an open of a live session shares it only if its agent and resume agree with the first opener's
  // (the agent checked first: one the runtime does not define is an UnknownAgentError here too)
  const openShared = (sessionId: string, options: ReturnType<typeof openOptionsOf>) => {
    const agent = options.agent === undefined ? undefined : askedAgent(agents, sessionId, options.agent);
    const asked = { ...(agent !== undefined ? { agent } : {}), ...(options.resumeGiven ? { resume: options.resumeGiven } : {}) };
    return live.open(sessionId, options.takeover, () => attach(sessionId, undefined, options.resume, options.agent), asked);
  };
  const inboxFor = sessionInboxes(store, o.clock);
  let closing: Promise<void> | undefined;
  /** The workers `serve` started and not yet ended: `close()` ends them. */
  const workers = new Set<ServeHandle>();
  return {
    store,
    get executionProfileFingerprint() {
      return agents.fingerprint('default');
    },
    // a serving worker (serve, the simulator) passes its lease guard as a second, internal argument marked SERVED
    openSession: async (sessionId, options?: OpenSessionOptions | ServedInternals) => {
      if (isServed(options)) return openServed(sessionId!, options);
      const id = sessionId ?? randomUUID();
      parseInput(SessionIdInput, id, 'openSession: sessionId');
      if (sessions.closed) throw new StoreClosedError('runtime');
      const wants = openOptionsOf(options);
      // a child session is its parent call's: refused before any holder record or writer is touched
      const parent = sessionId === undefined ? undefined : await recordedParent(store, id);
      if (parent) throw childSessionRefusal('openSession', id, parent);
      return openShared(id, wants);
    },
    run: ((message: PromptMessage, options?: RuntimeRunOptions) => {
      assertModel(o, 'runtime.run');
      const checks = { newId: () => newRunId(o.ids), model: o.model!, contentLimits: o.contentLimits };
      // the call is checked before the session opens: a bad one leaves nothing in the store
      return runOnFreshSession((id) => openShared(id, { resume: 'auto', takeover: false }), message, options, checks);
    }) as Runtime['run'],
    liveEnvelopes$: (sessionId) => sessions.envelopes$(sessionId),
    submit: (sessionId, entry) => submitToOpen(store, sessions, inboxFor, sessionId, promptEntry(entry), o.contentLimits),
    waitForResult: (sessionId, runId, options) => waitForResult(store, sessionId, runId, options),
    serve: (options) => {
      assertModel(o, 'runtime.serve');
      if (sessions.closed) throw new StoreClosedError('runtime');
      const worker = serve(
        {
          open: openServed,
          holds: (workerId) => ({
            claimed: (sessionId) => live.claimedBy(sessionId, workerId),
            ended: (sessionId) => live.claimEnded(sessionId, workerId),
          }),
          store,
          work: workOf(store, 'runtime.serve'),
          inboxFor,
          isKilled: killed,
          clock: o.clock,
          ...(o.inspect ? { inspect: o.inspect } : {}),
        },
        options,
      );
      // however it ends (stopped, or its machine failed), no claim of its keeps a session refused to the app
      workers.add(worker);
      worker.events$.subscribe({
        complete: () => {
          workers.delete(worker);
          live.workerEnded(worker.workerId);
        },
      });
      return worker;
    },
    // every call resolves once the store is closed (a second call shares the first's work); a
    // worker still serving stops once its sessions are closed (each run left where it stands, its
    // lease released with the resume mark while the store is still open), before the store closes
    close: () =>
      (closing ??= (async () => {
        killSwitch.unsubscribe();
        for (const s of sessions.closing()) await s.close();
        await Promise.all([...workers].map((w) => w.stop({ graceMs: 0 })));
        await store.close();
      })()),
  };
}
