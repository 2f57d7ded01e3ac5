import { ValidationError } from '../contracts/errors.js';
import { z } from 'zod';
import type { JsonValue } from '../contracts/json.js';
import type { ToolMode, ToolOutcomeInput, ToolSpec } from '../contracts/tools.js';
import { parseInput } from '../contracts/validate.js';
import { timerMs } from '../contracts/config.js';
import { isId, IdInput } from '../contracts/ids.js';

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

/** A tool the model may call. */
/** What a tool's `execute` may return: text, any JSON value, or a tool outcome. */
export type ToolReturn = string | ToolOutcomeInput | JsonValue;

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
   * mode, and is never reported uncertain.
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

/** Unknown keys are refused: a misspelt option (needApproval) must not quietly become its default. */
const ToolOptions = z.strictObject({
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'letters, digits, _ and -, at most 64'),
  description: z.string(),
  parameters: z.custom<z.ZodType>((v) => v instanceof z.ZodType, 'a zod schema'),
  mode: z.enum(['parallel', 'exclusive']).default('exclusive'),
  resources: z.union([z.array(IdInput), z.custom<(a: unknown) => string[]>((v) => typeof v === 'function')]).default([]),
  timeoutMs: timerMs.positive().optional(),
  needsApproval: z.union([z.boolean(), z.custom<(a: unknown) => boolean>((v) => typeof v === 'function')]).optional(),
  execute: z.custom<ToolDefinition['execute']>((v) => typeof v === 'function', 'a function'),
  reconcile: z.custom<NonNullable<ToolDefinition['reconcile']>>((v) => typeof v === 'function').optional(),
  /** A defined tool spread into defineTool (`{ ...tool, timeoutMs }`) brings its spec: recomputed. */
  spec: z.unknown().optional(),
});

export type ToolOptions<A> = Omit<ToolDefinition<A>, 'spec' | 'mode' | 'resources'> & {
  mode?: ToolMode;
  resources?: string[] | ((args: A) => string[]);
};

/**
 * Defines a tool. `mode` defaults to `exclusive` (runs alone, in order); declare `parallel` only
 * for side-effect-free tools. `resources` name what the call locks.
 * @example
 * const add = defineTool({
 *   name: 'add', description: 'Adds two numbers', mode: 'parallel',
 *   parameters: z.object({ a: z.number(), b: z.number() }),
 *   execute: ({ a, b }) => String(a + b),
 * })
 */
export function defineTool<A>(options: ToolOptions<A>): ToolDefinition<A> {
  const o = parseInput(ToolOptions, options, 'defineTool') as unknown as ToolDefinition<A>;
  // What the model is shown must be what validation accepts, in the shape both providers take:
  // a JSON Schema of an object. A type JSON Schema cannot express (z.date(), z.bigint(), z.map())
  // would be advertised as {} and then refused on every call.
  let schema: Record<string, unknown>;
  try {
    schema = z.toJSONSchema(options.parameters as z.ZodType, { io: 'input', unrepresentable: 'throw' }) as Record<string, unknown>;
  } catch (e) {
    throw new ValidationError(`defineTool: ${o.name}`, [
      {
        path: ['parameters'],
        message: `${(e as Error).message}; use types JSON Schema can express: strings, numbers, booleans, arrays, objects`,
      },
    ]);
  }
  if (schema.type !== 'object') {
    throw new ValidationError(`defineTool: ${o.name}`, [
      { path: ['parameters'], message: 'must be an object schema (z.object(...)): providers take tool arguments as a JSON object' },
    ]);
  }
  delete schema.$schema;
  return {
    ...o,
    execute: options.execute,
    reconcile: options.reconcile,
    spec: { name: o.name, description: o.description, parameters: schema },
  };
}

/**
 * The resource keys a call of `tool` locks. Contract: a tool's own `resources(args)` may throw;
 * one that returns anything but an array of keys (the id rule, IdInput: non-empty strings, no NUL,
 * no lone surrogate) throws here, naming the tool (a step fails on it as on a throw, with the
 * assistant message logged, never with a bad `tool/call` record).
 */
export function resourcesOf(tool: AnyTool, args: unknown): string[] {
  if (typeof tool.resources !== 'function') return tool.resources;
  const keys: unknown = tool.resources(args);
  if (!Array.isArray(keys) || !keys.every((k) => isId(k))) {
    throw new TypeError(`the resources function of tool ${tool.name} returned ${kindOf(keys)}, not an array of resource keys`);
  }
  return keys as string[];
}

const kindOf = (v: unknown): string => {
  if (!Array.isArray(v)) return v === null ? 'null' : typeof v;
  const bad: unknown = v.find((k) => !isId(k));
  return typeof bad === 'string'
    ? `an array with the key ${JSON.stringify(bad)} (an empty string, or one with a NUL or a lone surrogate)`
    : 'an array with a non-string key';
};
