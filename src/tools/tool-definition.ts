import type { z } from 'zod';
import type { JsonValue } from '../contracts/json.js';
import type { ToolMode, ToolOutcomeInput, ToolSpec } from '../contracts/tools.js';

// The shape of a tool (what defineTool, agentTool and mcpTools make, and runtimes hold), apart from
// defineTool: the agent values and their marks refer to tools without importing their maker.

/** What a tool's `execute` and `reconcile` receive besides the arguments. */
export interface ToolContext {
  /** Aborted on timeout, cancellation or kill switch: pass it on to any I/O. */
  signal: AbortSignal;
  /** Stable across recovery: the same call keeps the same key in every attempt. */
  idempotencyKey: string;
  sessionId: string;
  runId: string;
  callId: string;
  /** The seq of the call's `tool/call` record in the session's log (undefined for a call run outside a session). */
  callSeq?: number;
  /**
   * Sends a live `tool_update` to subscribers (not logged). `update` must be JSON (subscribers and
   * web streams serialize it): a BigInt, a cycle, a class instance or `undefined` throws a
   * ValidationError here, at once, and nothing is sent. An emit after the call's outcome is known
   * is dropped.
   */
  emit(update: unknown): void;
}

/** What a tool's `execute` may return: text, any JSON value, or a tool outcome. */
export type ToolReturn = string | ToolOutcomeInput | JsonValue;

/** A tool the model may call. */
export interface ToolDefinition<A = unknown> {
  name: string;
  description: string;
  parameters: z.ZodType<A>;
  mode: ToolMode;
  resources: string[] | ((args: A) => string[]);
  timeoutMs?: number;
  needsApproval?: boolean | ((args: A) => boolean);
  /**
   * Contract: called after `tool/call` is durable; may throw (recorded as a completed result with
   * `isError: true`); must honour `ctx.signal`. Returns the model's text (a string), any other
   * JSON value (serialised for the model, kept as the outcome's `structured`), or a tool outcome
   * (an object whose `kind` is an outcome kind). A value that is not JSON is an error result.
   */
  execute(args: A, ctx: ToolContext): Promise<ToolReturn> | ToolReturn;
  /**
   * Contract: called on recovery for an exclusive call whose result was never committed; returns
   * the outcome if it can tell what happened (using `ctx.idempotencyKey`), or undefined.
   */
  reconcile?(args: A, ctx: ToolContext): Promise<ToolOutcomeInput | undefined> | ToolOutcomeInput | undefined;
  /** JSON Schema of `parameters`, computed once. */
  readonly spec: ToolSpec;
  /**
   * What the tool's provider offers now (e.g. a digest of an MCP server's tool list), part of
   * the execution-profile fingerprint of every attempt that starts.
   * Contract: called synchronously when an attempt starts; must not throw.
   */
  revision?(): string;
  /**
   * The live list this tool came from (an MCP server's tools). Each attempt is offered the
   * list's tools as they are when it starts, in place of the tools of that list you passed: a
   * tool the list gained is offered, one it lost is not, a changed one is offered as it is now.
   */
  readonly list?: ToolList;
  /**
   * The tool resumes its own durable work when run again for the same call (an agentTool's child
   * session): a call whose result was not committed before a crash runs again, whatever its
   * mode, and is never reported uncertain. Only agentTool sets it (defineTool keeps it for an
   * agentTool spread in, and refuses it otherwise).
   */
  readonly resumable?: boolean;
}

/**
 * A list of tools that can change while the runtime runs (`mcpTools` makes one per server). A
 * running attempt keeps the tools it was offered; the next attempt gets the list as it is then.
 */
export interface ToolList {
  /**
   * The tools offered now (an array kept while the list is unchanged).
   * Contract: called synchronously when an attempt starts; must not throw.
   */
  tools(): readonly AnyTool[];
}

/** A tool of any argument type (what runtimes and catalogs hold). */
export type AnyTool = ToolDefinition<any>;
