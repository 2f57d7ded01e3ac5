import { z } from 'zod';
import { timerMs } from '../contracts/config.js';
import { IdInput } from '../contracts/ids.js';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import type { ToolContext } from './define-tool.js';
import type { JsonSchemaValidatorLike, McpClientLike } from './mcp-client.js';

/** What `reconcile` is told about a call whose outcome is unknown. */
export interface McpReconcileCall {
  /** The server's name of the tool (without `prefix`). */
  tool: string;
  arguments: Record<string, unknown>;
  idempotencyKey: string;
  /** A live client to ask the server with, when one could be had. */
  client?: McpClientLike;
}

export interface McpToolsOptions {
  /**
   * Tool names (the server's, without `prefix`, as in every option that names tools: a name the
   * server does not list is refused) that may run in parallel; every other tool is exclusive.
   */
  parallel?: string[];
  /** Also run in parallel the tools the server marks `readOnlyHint: true` (default false: a server is not trusted to say so). */
  trustAnnotations?: boolean;
  /** Only these tools (the server's names, each listed); default every tool the server lists. */
  include?: string[];
  /** Put before every tool name the model sees (`github_`), to keep the names of several servers apart. */
  prefix?: string;
  /** Aborts a call after this long (the runtime's tool timeout). */
  timeoutMs?: number;
  /**
   * Resource keys each call of a tool locks (by the server's tool name, listed), as `defineTool`'s
   * `resources`: an object's own entries, or a Map (e.g. for a tool named `__proto__`, which an
   * object literal cannot hold as an entry).
   */
  resources?: Record<string, string[]> | ReadonlyMap<string, readonly string[]>;
  /** Tool names (the server's, each listed: a misspelt one is refused, never ignored) that need approval before they run. */
  needsApproval?: string[];
  /**
   * Contract: called for an exclusive call whose outcome is unknown — the connection dropped
   * while it ran, or the process stopped before its result was recorded (recovery). Returns the
   * outcome when it can tell (e.g. by asking the server about `idempotencyKey`), or undefined; a
   * throw counts as undefined. The call is never sent again. With this option each tool has a
   * `reconcile` (recovery asks it); without it, such a call is `uncertain-hanging`.
   */
  reconcile?(call: McpReconcileCall, ctx: ToolContext): Promise<ToolOutcomeInput | undefined> | ToolOutcomeInput | undefined;
  /** A JSON Schema validator (the SDK's `jsonSchemaValidator` shape); default the SDK's Ajv one. */
  validator?: JsonSchemaValidatorLike;
  /**
   * Contract: called when a tool list read after the first (the server announced a change, or the
   * adapter reconnected) is refused — a ValidationError naming each bad tool: until a good list
   * comes, attempts that start are offered none of this server's tools — or when a list the server
   * announced cannot be read (the tools stay as they were). Never for the first list (`mcpTools`
   * throws that). May throw: the throw is ignored.
   */
  onListError?(error: Error): void;
}

/** `mcpTools`' options, checked (strict: an unknown key is refused). */
export const McpOptions = z.strictObject({
  parallel: z.array(z.string()).default([]),
  trustAnnotations: z.boolean().default(false),
  include: z.array(z.string()).optional(),
  prefix: z.string().default(''),
  timeoutMs: timerMs.positive().optional(),
  // a Map, so a tool named `constructor` or `__proto__` finds its own entry, never Object's
  resources: z
    .preprocess(ownEntries, z.map(z.string(), z.array(IdInput), { error: 'an object or a Map: tool name → resource keys' }))
    .optional(),
  needsApproval: z.array(z.string()).default([]),
  reconcile: z.custom<NonNullable<McpToolsOptions['reconcile']>>((v) => typeof v === 'function', 'a function').optional(),
  validator: z
    .custom<JsonSchemaValidatorLike>(
      (v) => typeof (v as JsonSchemaValidatorLike | undefined)?.getValidator === 'function',
      'a validator: { getValidator(schema) }',
    )
    .optional(),
  onListError: z.custom<NonNullable<McpToolsOptions['onListError']>>((v) => typeof v === 'function', 'a function').optional(),
});

export type ResolvedMcpOptions = z.output<typeof McpOptions>;

/** A plain object's own entries as a Map (a Map as it is; anything else left for the schema to refuse). */
function ownEntries(v: unknown): unknown {
  if (typeof v !== 'object' || v === null || v instanceof Map) return v;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null ? new Map(Object.entries(v)) : v;
}
