import { randomUUID } from 'node:crypto';
import type { AnyActorRef } from 'xstate';
import type { SessionServices } from '../actors/session-services.js';
import { StoreClosedError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import { SessionIdInput } from '../contracts/ids.js';
import { parseInput } from '../contracts/validate.js';
import type { EventStore } from '../persistence/event-store.js';
import { LogWriter } from '../persistence/log-writer.js';
import { SessionProjection } from '../persistence/projection.js';
import { Surface } from '../persistence/surface.js';
import { committedEnvelopes } from '../streams/committed-envelopes.js';
import { EnvelopeStream } from '../streams/envelopes.js';
import { SubscriberHub } from '../streams/subscribers.js';
import type { OpenInternals } from '../actors/worker-services.js';
import type { ResumeMode } from './auto-resume.js';
import { ExecutionSession } from './execution-session.js';
import { InputQueue, type QueuedInput } from './input-queue.js';
import type { OpenSessions } from './open-sessions.js';
import type { ResolvedRuntimeOptions } from './options.js';
import { loadOpenRun } from '../persistence/open-run-read.js';
import { recoveryOutcome, settleInterruptedFinal } from './recovery-outcome.js';
import { sessionServices } from './services.js';
import type { AgentRegistry } from './agent-registry.js';
import type { Agent } from '../tools/define-agent.js';
import { agentToRun, askedAgent, childSessionRefusal, recordedAgent } from './recorded-agent.js';
import { SessionAgent, type ParentLink } from './session-agent.js';
import { inspectUnder } from './child-inspection.js';
import type { Tracing } from './tracing-options.js';
import { SessionTracer } from './tracing.js';
import type { CallLimiter } from '../contracts/rate-limits.js';
import type { BudgetPool } from '../actors/budget-pool.js';
import type { RunChildren } from '../actors/run-children.js';

/** The agent each session ran when it was opened (LiveSessions compares a later opener's with it). */
const agentsAtOpen = new WeakMap<ExecutionSession, string>();
export const agentAtOpen = (session: ExecutionSession): string | undefined => agentsAtOpen.get(session);
/** The parent call of each child session this runtime opened (an app's open of a live one is refused). */
const parentsAtOpen = new WeakMap<ExecutionSession, ParentLink>();
export const parentAtOpen = (session: ExecutionSession): ParentLink | undefined => parentsAtOpen.get(session);

/** What a runtime opens its sessions with: the same for every session it opens. */
export interface SessionOpening {
  store: EventStore;
  options: ResolvedRuntimeOptions;
  /** The runtime's agents (docs/agents.md): `default` is its own model, tools, prompts, output schema. */
  agents: AgentRegistry;
  tracing: Tracing | undefined;
  sessions: OpenSessions;
  killed(): boolean;
  /** The runtime's rate limiter, shared by its sessions (absent without `rateLimits`). */
  limiter?: CallLimiter;
  /** The pools the runtime's child sessions spend from while their parent's call runs them (agent-calls.ts). */
  childPools: ReadonlyMap<string, BudgetPool>;
  /** Cancels the open runs of a cancelled run's children (child-cancel.ts). */
  children?: RunChildren;
}

/**
 * `runtime.openSession`: attaches a writer (fencing any older one), writes `session/attached`,
 * settles a final an interrupted attempt committed, and goes live with the session's services
 * built whole. `options.agent` picks a new session's agent; the runtime's own parts pass `guard`
 * (a serving worker's lease guards the writer) or `parent` (a child session's parent call, and
 * `callActor`, the tool-call actor its actors are inspected under).
 */
export async function openSession(
  r: SessionOpening,
  sessionId: string,
  options: { agent?: Agent | string; parent?: ParentLink; callActor?: AnyActorRef; resume?: ResumeMode } & Partial<OpenInternals> = {},
): Promise<ExecutionSession> {
  parseInput(SessionIdInput, sessionId, 'openSession: sessionId');
  const { guard, parent, agent: asked } = options;
  // a served session's interrupted run is its worker's to continue
  const resume: ResumeMode = options.resume ?? (guard ? 'served' : 'auto');
  const { store, options: o, sessions } = r;
  const askedName = asked === undefined ? undefined : askedAgent(r.agents, sessionId, asked);
  if (sessions.closed) throw new StoreClosedError('runtime');
  // Everything opening reads is read before the writer attaches, so that a damaged log is
  // reported (CorruptLogError) with nothing changed on disk; read again only if another
  // writer appended between the read and the attach.
  // the agent the log records (else the one asked for): an unknown one is refused before the attach
  let view = await loadSessionView(store, sessionId);
  // a child session is opened by its parent's call only (runtime.openSession refuses it before
  // anything; this catches one that became a child after that read)
  const seatOf = async () => {
    const recorded = await recordedAgent(store, sessionId, view.head);
    if (recorded.parent && !parent) throw childSessionRefusal('openSession', sessionId, recorded.parent);
    return agentToRun(r.agents, sessionId, recorded.agent, askedName);
  };
  let agentName = await seatOf();
  const attach = await store.attachWriter(sessionId);
  if (attach.lastSeq !== (view.head?.lastSeq ?? 0)) {
    view = await loadSessionView(store, sessionId);
    agentName = await seatOf();
  }
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
  if (guard) writer.guard = () => guard(writer.writerEpoch);
  let tracer: SessionTracer | undefined;
  const seat = new SessionAgent(r.agents, agentName, (m) => (tracer ? tracer.traceModel(m, o.pricing) : m), parent);
  const offered = seat.toolSet();
  const queue = new InputQueue(inputs);
  const hub = new SubscriberHub({ clock: o.clock });
  let opened: ExecutionSession | undefined; // the tracer reads the tools of its latest attempt
  tracer = r.tracing
    ? new SessionTracer(
        r.tracing,
        sessionId,
        store,
        o.clock,
        () => (opened?.attemptTools ?? offered).tools,
        () => writer.lastSeq,
        () => seat.name,
      )
    : undefined;
  const env: SessionServices = sessionServices(o, {
    sessionId,
    sessionInstanceId,
    writer,
    ...(store.blobs ? { blobs: store.blobs } : {}),
    projection,
    agent: seat,
    queue,
    hub,
    stream,
    tracer,
    limiter: r.limiter,
    childPools: r.childPools,
    ...(r.children ? { children: r.children } : {}),
    ...(parent ? { child: true } : {}),
  });
  if (tracer) stream.events$.subscribe((e) => tracer.onEnvelope(e));
  writer.stage(
    'session/attached',
    { turn: 0, step: 0, attempt: 0 },
    { sessionInstanceId, writerEpoch: attach.writerEpoch, agent: seat.name, ...(parent ? { parent } : {}) },
  );
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
  const sessionOptions = seat.options(o);
  if (options.callActor && o.inspect) sessionOptions.inspect = inspectUnder(o.inspect, options.callActor);
  const session = new ExecutionSession({
    sessionId,
    sessionInstanceId,
    writerEpoch: attach.writerEpoch,
    lastTurn: attach.lastTurn,
    env,
    store,
    options: sessionOptions,
    stream,
    toolSet: seat.toolSet,
    get runtimeOutput() {
      return seat.output;
    },
    runBudget: (name) => seat.budgetOfRun(name),
    ...(openRun ? { openRun } : {}),
    recovery,
    inputs: queue,
    hub,
    stateContext,
    isKilled: r.killed,
    resume,
  });
  if (sessions.closed) {
    // the runtime closed while this session was opening: it never goes live
    await session.close();
    throw new StoreClosedError('runtime');
  }
  opened = session;
  agentsAtOpen.set(session, seat.name);
  if (parent) parentsAtOpen.set(session, parent);
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
