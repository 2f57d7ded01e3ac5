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
import type { LogWriter } from '../persistence/log-writer.js';
import type { BlobStore } from '../persistence/blob-store.js';
import type { ContentLimits } from '../persistence/content-parts.js';
import type { Surface } from '../persistence/surface.js';
import type { LiveEvent } from '../streams/envelopes.js';

/**
 * Everything the run's actors reach, bound into them with `machine.provide({ actors })`; machine
 * context stays small and serializable.
 */
export interface SessionServices {
  sessionId: string;
  sessionInstanceId: string;
  writer: LogWriter;
  /** The store's blobs (content parts' bytes), if it keeps them. */
  blobs?: BlobStore;
  /** Size limits of content parts' bytes (a tool result's among them). */
  contentLimits: ContentLimits;
  /** The model-visible surface: the writer's projection, kept current as appends commit. */
  readonly surface: Surface;
  model: ModelProvider;
  tools: ReadonlyMap<string, AnyTool>;
  toolSpecs: ToolSpec[];
  toolCatalogDigest: string;
  /** System prompt and bootstrap messages, before the surface. */
  prefix: Message[];
  prefixDigest: string;
  prefixTokens: number;
  config: LoopConfig;
  budget: LoopBudget;
  pricing?: Pricing;
  delivery?: DeliveryOwner;
  verifier?: ToolVerifier;
  finalVerifier?: FinalVerifier;
  /** The output schema of the attempt under way (set when it starts; attempts run one at a time). */
  output?: OutputSpec;
  /** Seq of each committed `tool/call` whose result is not committed yet (its tool_start's logSeq): the writer's projection. */
  readonly callSeqs: ReadonlyMap<string, number>;
  /** Resource keys held by uncertain-hanging or unsettled cancelled calls: the writer's projection. */
  readonly heldLocks: ReadonlySet<string>;
  /** The runtime's clock: every timer, deadline, backoff and timeout of the session's actors. */
  clock: Clock;
  /** Glob patterns (`name` or `tool:<name>`) of calls that need approval. */
  approvalFor: readonly string[];
  /** Steer inputs accepted and not yet consumed, taken (removed) by the next model step. */
  takeSteers(): { inputId: string; messages: Message[] }[];
  /** Whether a steer input waits to be taken. */
  steersWaiting(): boolean;
  /** Publishes a live-only envelope (deltas, starts, updates); committed records announce themselves. */
  emit(event: LiveEvent, logSeq?: number): void;
  /** Resolves when every required subscriber has room again (the run's backpressure point). */
  backpressure(): Promise<void>;
  /** The session's OpenTelemetry tracer, when tracing is on. */
  tracer?: RunTracer;
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
