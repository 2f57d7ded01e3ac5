import { z } from 'zod';
import { IdInput } from './ids.js';
import { JsonValue } from './json.js';
import { InputContent, StoredContent } from './content.js';
import { Message, Usage } from './message.js';
import { Decimal } from './config.js';
import { Overrun } from './reservation.js';

/** `parallel` tools are side-effect free and may run concurrently; `exclusive` tools run alone. */
export const ToolMode = z.enum(['parallel', 'exclusive']);
export type ToolMode = z.infer<typeof ToolMode>;

/**
 * Model spending of the work a call did (an agentTool's child run, docs/agents.md "Budgets"):
 * counted in the run's usage, cost and budgets as its own calls are.
 */
const CallSpending = {
  /** Reported model usage: in the run's usage and its maxOutputTokens. */
  usage: Usage.optional(),
  /** That usage priced (decimal string): in the run's cost and its maxCost. */
  cost: Decimal.optional(),
  /** Calls counted at their reservation (their usage never came back): in the run's budgets as its own. */
  counted: z.object({ outputTokens: z.number().int().nonnegative(), cost: Decimal }).optional(),
  /** Its calls' usage reported above their reservations, each naming its session: in the run's `spending.overruns`. */
  overruns: z.array(Overrun).optional(),
};

const Completed = z.object({
  kind: z.literal('completed'),
  /** Text, or parts (an image a tool made): the log keeps their bytes as blobs (docs/providers.md, "Content parts"). */
  content: StoredContent,
  isError: z.boolean().default(false),
  concludesTurn: z.boolean().default(false),
  structured: JsonValue.optional(),
  /** Resource keys whose uncertain-hanging locks this result releases. */
  releaseResources: z.array(IdInput).default([]),
  additionalMessages: z.array(Message).optional(),
  ...CallSpending,
});
const Skipped = z.object({ kind: z.literal('skipped'), reason: z.string() });
const Cancelled = z.object({
  kind: z.literal('cancelled'),
  settled: z.boolean(),
  partialContent: z.string().optional(),
  resourceLocks: z.array(IdInput).default([]),
  ...CallSpending,
});
const UncertainSettled = z.object({ kind: z.literal('uncertain-settled'), content: z.string() });
const UncertainHanging = z.object({
  kind: z.literal('uncertain-hanging'),
  content: z.string(),
  resourceLocks: z.array(IdInput).default([]),
});

/** The outcome of one tool call (DESIGN §4 item 5), as the log keeps it. */
export const ToolOutcome = z.discriminatedUnion('kind', [Completed, Skipped, Cancelled, UncertainSettled, UncertainHanging]);
export type ToolOutcome = z.output<typeof ToolOutcome>;
/**
 * The outcome a tool returns: a completed one's content may carry images and files as bytes
 * (`Uint8Array` or base64), stored as blobs before the result is logged.
 */
export const ToolOutcomeReturn = z.discriminatedUnion('kind', [
  Completed.extend({ content: InputContent }),
  Skipped,
  Cancelled,
  UncertainSettled,
  UncertainHanging,
]);
/** What a tool's `execute` / `reconcile` may return before defaults are applied. */
export type ToolOutcomeInput = z.input<typeof ToolOutcomeReturn>;
/** An outcome as a tool returned it, checked (its bytes not stored yet). */
export type ReturnedOutcome = z.output<typeof ToolOutcomeReturn>;

/** A tool definition as providers see it: name, description, JSON Schema of the arguments. */
export const ToolSpec = z.object({
  name: z.string(),
  description: z.string(),
  parameters: z.record(z.string(), z.unknown()),
});
export type ToolSpec = z.infer<typeof ToolSpec>;
