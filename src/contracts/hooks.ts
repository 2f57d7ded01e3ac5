import type { Usage } from './message.js';
import type { ToolOutcome } from './tools.js';

/** What the delivery owner receives for a final answer. */
export interface FinalAnswer {
  finalMessageId: string;
  sessionId: string;
  runId: string;
  turn: number;
  step: number;
  content: string;
  /** The answer parsed and validated against the run's `output` schema, when the run has one. */
  output?: unknown;
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
