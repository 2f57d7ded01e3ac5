import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { StoreClosedError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import { SessionIdInput } from '../contracts/requests.js';
import { canonicalJson } from '../persistence/codec.js';
import { lmdbStore } from '../persistence/lmdb-store.js';
import type { EventStore } from '../persistence/event-store.js';
import { EnvelopeStream } from '../streams/envelopes.js';
import { SubscriberHub } from '../streams/subscribers.js';
import { ExecutionSession } from './execution-session.js';
import { loadOpenRun, recoveryOutcome, settleInterruptedFinal } from './recovery-outcome.js';
import { InputQueue, steersOf, type QueuedInput } from './input-queue.js';
import { askUserTool } from '../tools/ask-user.js';
import { defer, filter, from, isObservable, merge, mergeMap, Subject, type Observable } from 'rxjs';
import type { Envelope } from '../streams/envelopes.js';
import { LogWriter } from '../persistence/log-writer.js';
import { SessionProjection } from '../persistence/projection.js';
import { committedEnvelopes } from '../streams/committed-envelopes.js';
import type { SessionServices } from '../actors/session-services.js';
import { RuntimeOptions, type ResolvedRuntimeOptions } from './options.js';
import { outputSpec, withOutput } from '../actors/final-output.js';
import { toolSets } from './tool-set.js';
import { estimateTokens, sha256, Surface } from '../persistence/surface.js';
import type { Message } from '../contracts/message.js';
import { resolveTracing } from './tracing-options.js';
import { SessionTracer } from './tracing.js';
import type { InboxEntry, InboxReceipt, ServeOptions, WaitForResultOptions } from '../contracts/inbox.js';
import type { ExecutionResult } from '../contracts/requests.js';
import { SessionInbox } from './inbox.js';
import { submitEntry, workOf } from './submit.js';
import { waitForResult } from './wait-for-result.js';
import { serve, type OpenInternals, type ServeHandle } from './serve.js';
import { isAttach, LiveSessions, OpenSessionOptions, ATTACH } from './live-sessions.js';

export interface Runtime<TOut = unknown> {
  readonly store: EventStore;
  /** sha256 hex of the canonical execution profile (model id, prompts, tool catalog, config, budget). */
  readonly executionProfileFingerprint: string;
  /**
   * Attaches a writer, writes `session/attached` and loads the surface; the session this runtime
   * has open already is returned as it is (its writer closes with the last opener's `close`). A
   * session another live process writes is refused with SessionHeldError unless `takeover: true`
   * (which fences that writer); a second runtime of this process takes the session over
   * (docs/guarantees.md, "One live writer").
   * @example
   * const session = await runtime.openSession('s1')
   */
  openSession(sessionId: string, options?: OpenSessionOptions): Promise<ExecutionSession<TOut>>;
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
  const o = parseInput(RuntimeOptions, options, 'createRuntime');
  const ks = o.killSwitch;
  // every option checked before anything is opened
  if (ks !== undefined && !(ks instanceof AbortSignal) && !isObservable(ks)) {
    parseInput(z.never(), ks, 'createRuntime: killSwitch (an AbortSignal or an RxJS Observable)');
  }
  if (o.budget.maxCost !== undefined && !o.pricing) {
    parseInput(
      z.never(),
      undefined,
      'createRuntime: budget.maxCost (a cost budget needs a pricing function to price model calls; without one it could never be reached)',
    );
  }
  if (o.askUser && o.tools.some((t) => t.name === askUserTool.name)) {
    parseInput(
      z.never(),
      undefined,
      `createRuntime: tools (a tool named ${askUserTool.name} beside the askUser option: ` +
        `the built-in would replace it; rename it or leave askUser off)`,
    );
  }
  const defaultOutput = o.output ? outputSpec(o.output, 'createRuntime: output') : undefined;
  const tracing = resolveTracing(o.tracing);
  const store = o.store ?? lmdbStore({ path: './.actorloop' });
  const tools = o.askUser ? [...o.tools, askUserTool] : o.tools;
  const prefix: Message[] = [
    ...(o.systemPrompt !== undefined ? [{ role: 'system' as const, content: o.systemPrompt }] : []),
    ...o.bootstrapMessages,
  ];
  // the tools (a live list's as it is now) and the execution profile of an attempt starting now
  const toolSet = toolSets(tools, {
    modelId: o.model.modelId,
    systemPrompt: o.systemPrompt ?? null,
    bootstrapMessages: o.bootstrapMessages,
    config: o.config,
    budget: o.budget,
  });
  const sessions = new Set<ExecutionSession>();
  const opened$ = new Subject<ExecutionSession>();
  let closed = false;
  let killed = false;
  const kill = (on: boolean) => {
    killed = on;
    if (on) for (const s of sessions) void s.requestCancel('kill switch');
    else for (const s of sessions) s.resumeWaitingInputs(); // inputs held back while it was set
  };
  let killSub: { unsubscribe(): void } | undefined;
  if (ks instanceof AbortSignal) {
    if (ks.aborted) killed = true;
    else {
      const onKill = () => kill(true);
      ks.addEventListener('abort', onKill, { once: true });
      killSub = { unsubscribe: () => ks.removeEventListener('abort', onKill) }; // a shared signal keeps no closed runtime alive
    }
  } else if (isObservable(ks)) {
    killSub = ks.subscribe({ next: (v) => kill(Boolean(v)) }); // truthy = set, falsy = cleared
  }
  let closing: Promise<void> | undefined;
  const live = new LiveSessions(store, () => closed);
  /** Attaches a new writer (the body of openSession below, past the live-session and holder checks). */
  const attachNew = (sessionId: string, internals: OpenInternals = {}) =>
    (runtime.openSession as (id: string, i: OpenInternals & { [ATTACH]: true }) => Promise<ExecutionSession>)(sessionId, {
      ...internals,
      [ATTACH]: true,
    });
  const inboxes = new WeakMap<ExecutionSession, SessionInbox>();
  /** One applier per open session: the serving worker's and submit's fast path share it. */
  const inboxFor = (session: ExecutionSession): SessionInbox => {
    let inbox = inboxes.get(session);
    if (!inbox) inboxes.set(session, (inbox = new SessionInbox(session, store, workOf(store, 'runtime.submit'), o.clock)));
    return inbox;
  };

  const runtime: Runtime = {
    store,
    async submit(sessionId, entry) {
      if (closed) throw new StoreClosedError('runtime');
      const receipt = await submitEntry(store, sessionId, entry);
      // this runtime is the session's writer: it applies the entry now (a worker's drain would too)
      if (receipt.status !== 'refused') {
        const open = [...sessions].filter((s) => s.sessionId === sessionId).at(-1);
        if (open)
          void inboxFor(open)
            .drain()
            .catch(() => undefined); // left pending: the next drain retries
      }
      return receipt;
    },
    waitForResult(sessionId, runId, options) {
      return waitForResult(store, sessionId, runId, options);
    },
    serve(options) {
      return serve(
        {
          open: (sid, internals) => live.openServed(sid, internals.workerId, () => attachNew(sid, internals)),
          store,
          work: workOf(store, 'runtime.serve'),
          inboxFor,
          isKilled: () => killed,
          clock: o.clock,
          ...(o.inspect ? { inspect: o.inspect } : {}),
        },
        options,
      );
    },
    get executionProfileFingerprint() {
      return withOutput(toolSet().fingerprint, defaultOutput);
    },
    async openSession(sessionId: string, second?: OpenSessionOptions | OpenInternals) {
      parseInput(SessionIdInput, sessionId, 'openSession: sessionId');
      if (closed) throw new StoreClosedError('runtime');
      if (!isAttach(second)) {
        const { takeover } = parseInput(OpenSessionOptions, second ?? {}, 'openSession: options');
        return live.open(sessionId, takeover, () => attachNew(sessionId));
      }
      const internal: OpenInternals = second;
      // Everything opening reads is read before the writer attaches, so that a damaged log is
      // reported (CorruptLogError) with nothing changed on disk; read again only if another
      // writer appended between the read and the attach.
      let view = await loadSessionView(store, sessionId);
      const attach = await store.attachWriter(sessionId);
      if (attach.lastSeq !== (view.head?.lastSeq ?? 0)) view = await loadSessionView(store, sessionId);
      const { surface, head, inputs, stateContext } = view;
      let openRun = view.openRun;
      const sessionInstanceId = o.ids?.instanceId() ?? randomUUID();
      const stream = new EnvelopeStream();
      const projection = new SessionProjection(surface, head?.heldLocks ?? []);
      // calls a continue will run again: their tool_start carries the seq of the tool/call logged before
      for (const [callId, seq] of openRun?.callSeqs ?? []) projection.callSeqs.set(callId, seq);
      const writer = new LogWriter(store, sessionId, attach.writerEpoch, attach.lastSeq + 1, projection, {
        onCommitted: (records) => {
          for (const e of committedEnvelopes(records, sessionInstanceId)) stream.publish(e.event, e.logSeq);
        },
        ...(o.ids ? { eventId: () => o.ids!.eventId() } : {}),
      });
      const leaseGuard = internal?.guard;
      if (leaseGuard) writer.guard = () => leaseGuard(writer.writerEpoch);
      const offered = toolSet();
      const queue = new InputQueue(inputs);
      const hub = new SubscriberHub({ clock: o.clock });
      const tracer = tracing
        ? new SessionTracer(
            tracing,
            sessionId,
            store,
            o.clock,
            () => env.tools,
            () => writer.lastSeq,
          )
        : undefined;
      // the session's services, whole: nothing assigns them later but the attempt under way (tools, output)
      const env: SessionServices = {
        sessionId,
        sessionInstanceId,
        writer,
        surface: projection.surface,
        model: tracer ? tracer.traceModel(o.model) : o.model,
        tools: offered.tools,
        toolSpecs: offered.specs,
        toolCatalogDigest: offered.catalogDigest,
        prefix,
        prefixDigest: sha256(canonicalJson(prefix)),
        prefixTokens: prefix.reduce((n, m) => n + estimateTokens(m), 0),
        config: o.config,
        budget: o.budget,
        ...(o.pricing ? { pricing: o.pricing } : {}),
        ...(o.delivery ? { delivery: o.delivery } : {}),
        ...(o.verifier ? { verifier: o.verifier } : {}),
        ...(o.finalVerifier ? { finalVerifier: o.finalVerifier } : {}),
        heldLocks: projection.heldLocks,
        callSeqs: projection.callSeqs,
        clock: o.clock,
        approvalFor: o.approvalFor,
        ...steersOf(queue),
        backpressure: () => hub.whenWritable(),
        emit: (event, logSeq) => stream.publish(event, logSeq),
        ...(tracer ? { tracer } : {}),
      };
      if (tracer) stream.events$.subscribe((e) => tracer.onEnvelope(e));
      writer.stage('session/attached', { turn: 0, step: 0, attempt: 0 }, { sessionInstanceId, writerEpoch: attach.writerEpoch });
      await writer.commit();
      let settled = { delivered: [] as string[], unknown: [] as string[] };
      if (openRun && openRun.undeliveredFinals.length > 0) {
        const settledRun = openRun; // settling records its final ids on it
        openRun = await settleInterruptedFinal(env, openRun);
        settled = { delivered: settledRun.deliveredFinalIds, unknown: settledRun.deliveryUnknownFinalIds };
      }
      const recovery = await recoveryOutcome(store, env, head, openRun, settled);
      const session = new ExecutionSession({
        sessionId,
        sessionInstanceId,
        writerEpoch: attach.writerEpoch,
        lastTurn: attach.lastTurn,
        env,
        store,
        options: o as ResolvedRuntimeOptions,
        stream,
        toolSet,
        ...(openRun ? { openRun } : {}),
        recovery,
        inputs: queue,
        hub,
        stateContext,
        isKilled: () => killed,
      });
      if (closed) {
        // the runtime closed while this session was opening: it never goes live
        await session.close();
        throw new StoreClosedError('runtime');
      }
      sessions.add(session);
      opened$.next(session);
      const close = session.close.bind(session);
      session.close = async () => {
        sessions.delete(session);
        await close();
        tracer?.close();
      };
      session.resumeWaitingInputs(); // accepted before a restart: they run now, as if just submitted
      return session;
    },
    liveEnvelopes$(sessionId: string) {
      const mine = (s: ExecutionSession) => s.sessionId === sessionId;
      return defer(() => merge(from([...sessions].filter(mine)), opened$.pipe(filter(mine)))).pipe(mergeMap((s) => s.events$));
    },
    close() {
      // every call resolves once the store is closed (a second call shares the first's work)
      closing ??= (async () => {
        closed = true;
        killSub?.unsubscribe();
        opened$.complete();
        for (const s of [...sessions]) await s.close();
        await store.close();
      })();
      return closing;
    },
  };
  return runtime;
}

/** What opening a session reads from the log: surface, head, open run, pending inputs, stateContext. */
async function loadSessionView(store: EventStore, sessionId: string) {
  // the head first: openSession reads the view again if the log grew after it (an older writer's
  // append landing between these reads would otherwise leave the surface older than the head)
  const head = await store.getHead(sessionId);
  const surface = new Surface();
  surface.load(
    typeof store.loadStoredSurface === 'function'
      ? await store.loadStoredSurface(sessionId)
      : { chunks: [], records: await store.loadSurface(sessionId) },
  );
  const openRun = await loadOpenRun(store, sessionId, head);
  const inputs: QueuedInput[] = [];
  for (const p of head?.pendingInputs ?? []) {
    const e = await store.getEventById(sessionId, `input:${p.inputId}`);
    if (e) inputs.push({ inputId: p.inputId, mode: p.mode, messages: e.payload.messages as Message[], status: 'accepted' });
  }
  let stateContext: unknown;
  if (head && head.stateContextSeq > 0) {
    for await (const e of store.readEvents(sessionId, { fromSeq: head.stateContextSeq, toSeq: head.stateContextSeq }))
      stateContext = e.payload.stateContext;
  }
  return { surface, head, openRun, inputs, stateContext };
}
