import type { BlobStore } from '../persistence/blob-store.js';
import type { SessionServices } from '../actors/session-services.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { SessionProjection } from '../persistence/projection.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { SubscriberHub } from '../streams/subscribers.js';
import { steersOf, type InputQueue } from './input-queue.js';
import type { ResolvedRuntimeOptions } from './options.js';
import type { SessionTracer } from './tracing.js';
import type { SessionAgent } from './session-agent.js';
import type { CallLimiter } from '../contracts/rate-limits.js';
import { SessionBudgets, type BudgetPool } from '../actors/budget-pool.js';
import type { RunChildren } from '../actors/run-children.js';
import { WaitStops } from '../actors/wait-stops.js';

/** What one session opened with, that its services are made of. */
export interface OpenedParts {
  sessionId: string;
  sessionInstanceId: string;
  writer: LogWriter;
  /** The store's blobs, if it keeps them. */
  blobs?: BlobStore;
  projection: SessionProjection;
  /** The agent the session runs: its model, prefix and approvals are read from it (a handoff switches them). */
  agent: SessionAgent;
  queue: InputQueue;
  hub: SubscriberHub;
  stream: EnvelopeStream;
  tracer: SessionTracer | undefined;
  limiter: CallLimiter | undefined;
  /** The pools the runtime's child sessions spend from, by child session id (set while their parent's call runs them). */
  childPools: ReadonlyMap<string, BudgetPool>;
  /** Cancels the open runs of a cancelled run's children (the runtime's child sessions). */
  children?: RunChildren;
  /** A child session (an agent call's): its final answer is its parent call's result, never the app's delivery. */
  child?: boolean;
}

/**
 * A session's services, whole: nothing assigns them later (an attempt's tools and output
 * schema are its run input). The model, prefix and approvals are the session's agent's, read
 * through it: a handoff (docs/agents.md) switches them from the next model call on.
 */
export function sessionServices(o: ResolvedRuntimeOptions, p: OpenedParts): SessionServices {
  const { tracer, projection, hub, stream, agent } = p;
  return {
    sessionId: p.sessionId,
    sessionInstanceId: p.sessionInstanceId,
    writer: p.writer,
    ...(p.blobs ? { blobs: p.blobs } : {}),
    contentLimits: o.contentLimits,
    surface: projection.surface,
    get model() {
      return agent.model;
    },
    get prefix() {
      return agent.profile.prefix;
    },
    get prefixDigest() {
      return agent.profile.prefixDigest;
    },
    get prefixTokens() {
      return agent.profile.prefixTokens;
    },
    get approvalFor() {
      return agent.profile.approvalFor;
    },
    agent,
    config: o.config,
    get budget() {
      return agent.profile.budget;
    },
    ...(o.pricing ? { pricing: o.pricing } : {}),
    ...(o.delivery && !p.child ? { delivery: o.delivery } : {}),
    ...(o.verifier ? { verifier: o.verifier } : {}),
    ...(o.finalVerifier ? { finalVerifier: o.finalVerifier } : {}),
    heldLocks: projection.heldLocks,
    callSeqs: projection.callSeqs,
    clock: o.clock,
    ...steersOf(p.queue),
    backpressure: () => hub.whenWritable(),
    emit: (event, logSeq) => stream.publish(event, logSeq),
    ...(tracer ? { tracer } : {}),
    inFlight: {},
    ...(p.children ? { children: p.children } : {}),
    budgets: new SessionBudgets(p.sessionId, () => p.childPools.get(p.sessionId)),
    ...(p.limiter ? { rateLimiter: p.limiter, waitStops: new WaitStops() } : {}),
  };
}
