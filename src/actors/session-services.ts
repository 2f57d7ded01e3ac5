import type { DeliveryOwner, FinalVerifier, Pricing, ToolVerifier } from '../contracts/hooks.js';
import type { LoopBudget, LoopConfig } from '../contracts/config.js';
import type { Message } from '../contracts/message.js';
import type { ModelProvider } from '../contracts/model.js';
import type { ToolSpec } from '../contracts/tools.js';
import type { AnyTool } from '../tools/define-tool.js';
import type { LogWriter } from '../persistence/log-writer.js';
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
  surface: Surface;
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
  /** The run whose running attempt has an accepted stopAfterCurrentToolRound (set by the session). */
  stopAcceptedFor?: string;
  /** Seq of each committed `tool/call` whose result is not committed yet: its tool_start's logSeq. */
  callSeqs: Map<string, number>;
  /** Resource keys held by uncertain-hanging or unsettled cancelled calls. */
  heldLocks: Set<string>;
  /** Aborted by requestCancel and the kill switch (a new signal for every attempt). */
  cancelSignal: AbortSignal;
  /** Glob patterns (`name` or `tool:<name>`) of calls that need approval. */
  approvalFor: readonly string[];
  /** Steer inputs accepted and not yet consumed, taken (removed) by the next model step. */
  takeSteers(): { inputId: string; messages: Message[] }[];
  emit(event: LiveEvent, logSeq?: number): void;
  /** Resolves when every required subscriber has room again (the run's backpressure point). */
  backpressure(): Promise<void>;
}
