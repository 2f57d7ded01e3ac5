import { randomUUID } from 'node:crypto';
import type { OutputSpec } from '../actors/final-output.js';
import type { SessionServices } from '../actors/session-services.js';
import { StoreClosedError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import { SessionIdInput } from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import type { EventStore } from '../persistence/event-store.js';
import { LogWriter } from '../persistence/log-writer.js';
import { SessionProjection } from '../persistence/projection.js';
import { Surface } from '../persistence/surface.js';
import { committedEnvelopes } from '../streams/committed-envelopes.js';
import { EnvelopeStream } from '../streams/envelopes.js';
import { SubscriberHub } from '../streams/subscribers.js';
import type { OpenInternals } from '../actors/worker-services.js';
import { ExecutionSession } from './execution-session.js';
import { InputQueue, type QueuedInput } from './input-queue.js';
import type { OpenSessions } from './open-sessions.js';
import type { ResolvedRuntimeOptions } from './options.js';
import { loadOpenRun, recoveryOutcome, settleInterruptedFinal } from './recovery-outcome.js';
import { sessionServices, type SessionPrefix } from './services.js';
import type { ToolSet } from './tool-set.js';
import type { Tracing } from './tracing-options.js';
import { SessionTracer } from './tracing.js';
import type { CallLimiter } from './rate-limits.js';

/** What a runtime opens its sessions with: the same for every session it opens. */
export interface SessionOpening {
  store: EventStore;
  options: ResolvedRuntimeOptions;
  /** The tools of an attempt starting now, and its execution-profile fingerprint. */
  toolSet: () => ToolSet;
  /** The runtime's output schema, built once. */
  runtimeOutput: OutputSpec | undefined;
  prefix: SessionPrefix;
  tracing: Tracing | undefined;
  sessions: OpenSessions;
  killed(): boolean;
  /** The runtime's rate limiter, shared by its sessions (absent without `rateLimits`). */
  limiter?: CallLimiter;
}

/**
 * `runtime.openSession`: attaches a writer (fencing any older one), writes `session/attached`,
 * settles a final an interrupted attempt committed, and goes live with the session's services
 * built whole. `internal` is a serving worker's (its lease guards the writer).
 */
export async function openSession(r: SessionOpening, sessionId: string, internal?: OpenInternals): Promise<ExecutionSession> {
  parseInput(SessionIdInput, sessionId, 'openSession: sessionId');
  const { store, options: o, sessions } = r;
  if (sessions.closed) throw new StoreClosedError('runtime');
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
  const offered = r.toolSet();
  const queue = new InputQueue(inputs);
  const hub = new SubscriberHub({ clock: o.clock });
  let opened: ExecutionSession | undefined; // the tracer reads the tools of its latest attempt
  const tracer = r.tracing
    ? new SessionTracer(
        r.tracing,
        sessionId,
        store,
        o.clock,
        () => (opened?.attemptTools ?? offered).tools,
        () => writer.lastSeq,
      )
    : undefined;
  const env: SessionServices = sessionServices(o, {
    sessionId,
    sessionInstanceId,
    writer,
    projection,
    prefix: r.prefix,
    queue,
    hub,
    stream,
    tracer,
    limiter: r.limiter,
  });
  if (tracer) stream.events$.subscribe((e) => tracer.onEnvelope(e));
  writer.stage('session/attached', { turn: 0, step: 0, attempt: 0 }, { sessionInstanceId, writerEpoch: attach.writerEpoch });
  await writer.commit();
  let settled = { delivered: [] as string[], unknown: [] as string[] };
  if (openRun && openRun.undeliveredFinals.length > 0) {
    const settledRun = openRun; // settling records its final ids on it
    openRun = await settleInterruptedFinal(env, openRun);
    settled = { delivered: settledRun.deliveredFinalIds, unknown: settledRun.deliveryUnknownFinalIds };
  }
  const recovery = await recoveryOutcome(
    store,
    { sessionId, heldLocks: env.heldLocks, writer, tools: offered.tools },
    head,
    openRun,
    settled,
  );
  const session = new ExecutionSession({
    sessionId,
    sessionInstanceId,
    writerEpoch: attach.writerEpoch,
    lastTurn: attach.lastTurn,
    env,
    store,
    options: o,
    stream,
    toolSet: r.toolSet,
    runtimeOutput: r.runtimeOutput,
    ...(openRun ? { openRun } : {}),
    recovery,
    inputs: queue,
    hub,
    stateContext,
    isKilled: r.killed,
  });
  if (sessions.closed) {
    // the runtime closed while this session was opening: it never goes live
    await session.close();
    throw new StoreClosedError('runtime');
  }
  opened = session;
  sessions.add(session);
  const close = session.close.bind(session);
  session.close = async () => {
    sessions.delete(session);
    await close();
    tracer?.close();
  };
  session.resumeWaitingInputs(); // accepted before a restart: they run now, as if just submitted
  return session;
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
