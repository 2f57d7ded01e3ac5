import type { RunChildren } from './run-children.js';
import type { Reservation } from '../contracts/reservation.js';
import type { SessionBudgets } from './budget-pool.js';
import type { ActorSystem } from 'xstate';
import type { Clock } from '../contracts/clock.js';
import type { DeliveryOwner, FinalVerifier, Pricing, ToolVerifier } from '../contracts/hooks.js';
import type { LoopBudget, LoopConfig } from '../contracts/config.js';
import type { Message } from '../contracts/message.js';
import type { ModelProvider } from '../contracts/model.js';
import type { ToolSpec } from '../contracts/tools.js';
import type { RunTracer } from '../contracts/tracing.js';
import type { OutputSpec } from './final-output.js';
import type { AnyTool } from '../tools/define-tool.js';
import type { CallLimiter } from '../contracts/rate-limits.js';
import type { WaitStops } from './wait-stops.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { BlobStore } from '../persistence/blob-store.js';
import type { ContentLimits } from '../persistence/content-parts.js';
import type { Surface } from '../persistence/surface.js';
import type { LiveEvent } from '../streams/envelopes.js';
import { canonicalJson } from '../persistence/codec.js';
import { sha256 } from '../persistence/surface.js';

/**
 * Everything the run's actors reach, bound into them with `machine.provide({ actors })`; machine
 * context stays small and serializable. Built once when the session opens and never assigned
 * after: what differs per attempt (its tools, its output schema) is the attempt's run input.
 */
export interface SessionServices {
  readonly sessionId: string;
  readonly sessionInstanceId: string;
  readonly writer: LogWriter;
  /** The store's blobs (content parts' bytes), if it keeps them. */
  readonly blobs?: BlobStore;
  /** Size limits of content parts' bytes (a tool result's among them). */
  readonly contentLimits: ContentLimits;
  /** The model-visible surface: the writer's projection, kept current as appends commit. */
  readonly surface: Surface;
  readonly model: ModelProvider;
  /** System prompt and bootstrap messages, before the surface. */
  readonly prefix: Message[];
  readonly prefixDigest: string;
  readonly prefixTokens: number;
  readonly config: LoopConfig;
  readonly budget: LoopBudget;
  readonly pricing?: Pricing;
  readonly delivery?: DeliveryOwner;
  readonly verifier?: ToolVerifier;
  readonly finalVerifier?: FinalVerifier;
  /** Seq of each committed `tool/call` whose result is not committed yet (its tool_start's logSeq): the writer's projection. */
  readonly callSeqs: ReadonlyMap<string, number>;
  /** Resource keys held by uncertain-hanging or unsettled cancelled calls: the writer's projection. */
  readonly heldLocks: ReadonlySet<string>;
  /** The runtime's clock: every timer, deadline, backoff and timeout of the session's actors. */
  readonly clock: Clock;
  /** Glob patterns (`name` or `tool:<name>`) of calls that need approval. */
  readonly approvalFor: readonly string[];
  /** Steer inputs accepted and not yet consumed, taken (removed) by the next model step. */
  takeSteers(): { inputId: string; messages: Message[] }[];
  /** Whether a steer input waits to be taken. */
  steersWaiting(): boolean;
  /** Publishes a live-only envelope (deltas, starts, updates); committed records announce themselves. */
  emit(event: LiveEvent, logSeq?: number): void;
  /** Resolves when every required subscriber has room again (the run's backpressure point). */
  backpressure(): Promise<void>;
  /** The runtime's rate limits (the `rateLimits` option), shared by every session: absent without any. */
  readonly rateLimiter?: CallLimiter;
  /** The session's stop-after-round requests, which end its calls' waits for a rate limit. */
  readonly waitStops?: WaitStops;
  /** The session's OpenTelemetry tracer, when tracing is on. */
  readonly tracer?: RunTracer;
  /** The reservation of the model call in flight (the session snapshot's `spending` shows it), if any. */
  readonly inFlight?: { reservation?: Reservation };
  /**
   * The pools of sub-agents' budgets (docs/agents.md, "Budgets"): the one this session's run spends
   * from when it is a child (`above`), and its own batch's for its children.
   */
  readonly budgets?: SessionBudgets;
  /** The agent the session runs (docs/agents.md): recorded in run/start, switched by a handoff. */
  readonly agent?: AgentSeat;
  /** The child sessions of its agent calls: a cancelled run cancels their open runs (absent: none to cancel). */
  readonly children?: RunChildren;
}

/**
 * The tools one attempt is offered (a live list's as it was when the attempt started): part of
 * its run input, so that a running attempt keeps the tools it started with.
 */
export interface OfferedTools {
  readonly tools: ReadonlyMap<string, AnyTool>;
  readonly specs: ToolSpec[];
  /** sha256 of the catalog (specs, modes, resources): part of each model request's digest. */
  readonly catalogDigest: string;
}

/** What an attempt whose run input names no tools is offered: none (the digest is an empty catalog's, as a tool set's would be). */
export const NO_TOOLS: OfferedTools = Object.freeze({
  tools: new Map<string, AnyTool>(),
  specs: [],
  catalogDigest: sha256(canonicalJson([])),
});

/** What a session's services hold of the agent it runs (the run's actors read it; a handoff switches it). */
export interface AgentSeat {
  /** The agent the session runs now. */
  readonly name: string;
  /** A child session's parent call (an agentTool's), recorded in its run/start. */
  readonly parent?: { sessionId: string; runId: string; callId: string; seq?: number };
  /** The agent a tool of this name hands off to, when it is one of the current agent's transfer tools. */
  handoffTarget(toolName: string): string | undefined;
  /**
   * Hands the session to agent `to` from the next model call on (its model, instructions and
   * approvals): returns the tools the running attempt is offered from then on, and the target's
   * output schema when it has one (the run's answer is of it).
   */
  handoff(to: string): { offered: OfferedTools; output?: OutputSpec };
}

/**
 * Where an actor finds its session's services: given to its creator (a test binding one actor
 * with `machine.provide`), or looked up from the actor system it runs in — the runtime binds its
 * machines once per process and registers each session's services with its session actor's
 * system (src/runtime/session-actors.ts), so that opening a session builds no machine.
 */
export type ServicesSource = SessionServices | ((system: ActorSystem<any>) => SessionServices);

/** The services `source` gives an actor running in `system`. */
export const servicesIn = (source: ServicesSource, system: ActorSystem<any>): SessionServices =>
  typeof source === 'function' ? source(system) : source;

/**
 * Whether the next model call's context is ready as it stands: no steer input waits to join it,
 * and system prompt + bootstrap + surface (with the results still landing) fit `contextWindow −
 * outputReserve` (DESIGN §4 items 1, 9).
 * Otherwise the run prepares it first (prepare-context.ts).
 */
export const contextReady = (env: SessionServices): boolean =>
  !env.steersWaiting() && env.prefixTokens + env.surface.tokens + env.writer.pendingTokens <= contextLimit(env);

/** The most tokens a model request's context may hold: `contextWindow − outputReserve`. */
export const contextLimit = (env: Pick<SessionServices, 'config'>): number => env.config.contextWindow - env.config.outputReserve;
