import type { LoopBudget, LoopConfig } from '../contracts/config.js';
import type { Message, Usage } from '../contracts/message.js';
import type { ModelProvider } from '../contracts/model.js';
import type { ToolOutcome, ToolSpec } from '../contracts/tools.js';
import type { AnyTool } from '../tools/define-tool.js';
import type { LogWriter } from './log-writer.js';
import type { Surface } from './surface.js';
import type { LiveEvent } from '../streams/envelopes.js';

/** What the delivery owner receives for a final answer. */
export interface FinalAnswer {
  finalMessageId: string;
  sessionId: string;
  runId: string;
  turn: number;
  step: number;
  content: string;
}

/**
 * The owner of final answers. Contract: `deliver` is called only after `final/message` is
 * durable; a throw records `delivery/unknown` (the run ends `delivery_unknown`). Declare
 * `idempotent: true` only if delivering the same `finalMessageId` twice is harmless: then a final
 * whose delivery was interrupted by a crash is delivered again on recovery.
 */
export interface DeliveryOwner {
  deliver(final: FinalAnswer): Promise<void>;
  idempotent?: boolean;
}

/**
 * Checks a tool result. Contract: returns undefined to accept or a string (feedback the model
 * reads) to reject; may be async; a throw counts as a rejection with the error's message.
 */
export type ToolVerifier = (name: string, outcome: ToolOutcome) => string | undefined | Promise<string | undefined>;
/** Checks a final answer; same contract as ToolVerifier. */
export type FinalVerifier = (content: string) => string | undefined | Promise<string | undefined>;
/** Prices one model call as a decimal string. Contract: synchronous, must not throw. */
export type Pricing = (usage: Usage, modelId: string) => string;

/**
 * Everything the run's actors reach, bound into them with `machine.provide({ actors })`; machine
 * context stays small and serializable.
 */
export interface RunEnv {
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
