import { z } from 'zod';
import { ValidationError } from '../contracts/errors.js';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import { parseInput } from '../contracts/validate.js';
import type { AnyTool, ToolContext, ToolDefinition, ToolList } from './define-tool.js';
import { classifyFailure, sendCall, type JsonSchemaValidatorLike, type McpClientLike, type McpToolInfo } from './mcp-client.js';
import { McpConnection, type Link } from './mcp-connection.js';
import { McpOptions, type McpToolsOptions, type ResolvedMcpOptions } from './mcp-options.js';
import type { Listing } from './mcp-list.js';
import { callResultSchema, readResult } from './mcp-result.js';

/** The `_meta` key that carries a call's idempotency key to the server. */
export const IDEMPOTENCY_META_KEY = 'actorloop/idempotencyKey';

const isClient = (v: unknown): v is McpClientLike =>
  typeof v === 'object' &&
  v !== null &&
  (['listTools', 'callTool', 'close'] as const).every((m) => typeof (v as Record<string, unknown>)[m] === 'function');

const NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * The tools of an MCP server as tool definitions (DESIGN §4 item 5). `client` is a connected
 * `Client` of `@modelcontextprotocol/sdk`, or a function that connects a new one — with a
 * function, the adapter reconnects after the server restarts or the connection drops.
 *
 * Each tool's JSON Schema is what the model is shown and what its arguments are checked against
 * before the call (a bad call is fed back to the model like any schema failure). Tools are
 * `exclusive` unless named in `parallel` (or, with `trustAnnotations`, marked `readOnlyHint`).
 * Every call carries its idempotency key in the request's `_meta` (`actorloop/idempotencyKey`).
 * An exclusive call whose connection drops mid-call is never sent again: `reconcile` is asked,
 * else it is `uncertain-hanging`. A response the server sent is the call's result, never a
 * refusal or a drop: one that does not fit the MCP schema of a tool result, or the tool's
 * `outputSchema`, is delivered with the mismatch named after its text. A tool whose schema cannot be compiled, or that does not fit the
 * MCP schema of a tool, refuses the whole set (ValidationError naming it). A tool's name is never
 * a property name: `constructor` or `__proto__` finds its own options, or none. The options that
 * name tools (`include`, `parallel`, `needsApproval`, `resources`) take the server's names, without
 * `prefix`; a name the server does not list is refused (ValidationError naming it).
 *
 * The tools follow the server's list: when the server announces a change
 * (`notifications/tools/list_changed`) or the adapter reconnects, the list is read again, and
 * each attempt that starts afterwards is offered the tools as they are then (and records the new
 * execution-profile fingerprint); an attempt under way keeps the tools it was offered.
 * @example
 * const client = new Client({ name: 'app', version: '1.0.0' })
 * await client.connect(new StdioClientTransport({ command: 'node', args: ['server.js'] }))
 * const runtime = createRuntime({ model, tools: await mcpTools(client, { parallel: ['search'] }) })
 */
export async function mcpTools(client: McpClientLike | (() => Promise<McpClientLike>), options: McpToolsOptions = {}): Promise<AnyTool[]> {
  if (typeof client !== 'function' && !isClient(client)) {
    throw new ValidationError('mcpTools', [{ path: ['client'], message: 'a connected MCP Client, or a function that connects one' }]);
  }
  const o = parseInput(McpOptions, options, 'mcpTools');
  const validator = o.validator ?? (await defaultValidator());
  const conn = new McpConnection(client);
  await conn.get();
  const list = new McpToolList(conn, validator, o);
  const issues = list.build(conn.listing, true);
  if (issues.length > 0) {
    await conn.close();
    throw new ValidationError('mcpTools', issues);
  }
  const reportError = (e: Error) => {
    try {
      o.onListError?.(e);
    } catch {
      // the app's hook failing changes nothing here
    }
  };
  conn.onList = (listing) => {
    const refused = list.build(listing, false);
    if (refused.length > 0) reportError(new ValidationError('mcpTools (a tool list read again)', refused));
  };
  conn.onListError = (e) => reportError(e instanceof Error ? e : new Error(String(e)));
  return [...list.tools()];
}

type Issue = { path: (string | number)[]; message: string };

/**
 * The server's tools as tool definitions, built again from every list the connection reads. A
 * tool listed unchanged keeps its definition; a refused list offers no tools (never a partial list).
 */
class McpToolList implements ToolList {
  private offered: readonly AnyTool[] = [];
  /** The definitions offered, by what was listed of them. */
  private byListing = new Map<string, AnyTool>();

  constructor(
    private readonly conn: McpConnection,
    private readonly validator: JsonSchemaValidatorLike,
    private readonly o: ResolvedMcpOptions,
  ) {}

  tools(): readonly AnyTool[] {
    return this.offered;
  }

  /**
   * Offers the tools of `listing`, or none (returning why) if one is refused (by the MCP schema, a
   * name no provider takes, a schema that cannot be compiled; a tool `include` leaves out is not
   * looked at); `first`: every name the options give must be listed.
   */
  build(listing: Listing, first: boolean): Issue[] {
    const { o } = this;
    const listed = listing.tools;
    const wanted = (name: string) => o.include === undefined || o.include.includes(name);
    const issues: Issue[] = first ? unlistedNames(o, new Set([...listed, ...listing.refused].map((t) => t.name))) : [];
    for (const r of listing.refused) if (wanted(r.name)) issues.push({ path: ['tools', r.name, ...r.path], message: r.message });
    const tools: AnyTool[] = [];
    const byListing = new Map<string, AnyTool>();
    for (const info of listed) {
      if (!wanted(info.name)) continue;
      const name = o.prefix + info.name;
      if (!NAME.test(name)) {
        issues.push({
          path: ['tools', info.name],
          message:
            `the name ${name} does not fit the providers' rule (letters, digits, _ and -, at most 64): ` +
            `leave the tool out with include, or change prefix`,
        });
        continue;
      }
      const listing = JSON.stringify([info.name, info.title, info.description, info.inputSchema, info.annotations]);
      let tool = this.byListing.get(listing);
      if (!tool) {
        const check = compile(this.validator, info);
        if (typeof check === 'string') {
          issues.push({ path: ['tools', info.name, 'inputSchema'], message: check });
          continue;
        }
        tool = toolFor(info, name, check, this.conn, this.validator, o, this);
      }
      tools.push(tool);
      byListing.set(listing, tool);
    }
    if (issues.length > 0) {
      this.offered = [];
      return issues;
    }
    const same = tools.length === this.offered.length && tools.every((t, i) => t === this.offered[i]);
    if (!same) this.offered = tools;
    this.byListing = byListing;
    return [];
  }
}

/**
 * The names `include`, `parallel`, `needsApproval` and `resources` give that the server does not
 * list (they take the server's names): a misspelt or prefixed name would otherwise leave its tool
 * without the approval, or the lock, it was meant to have.
 */
function unlistedNames(o: ResolvedMcpOptions, listed: ReadonlySet<string>): Issue[] {
  const options = [
    ['include', o.include ?? []],
    ['parallel', o.parallel],
    ['needsApproval', o.needsApproval],
    ['resources', [...(o.resources?.keys() ?? [])]],
  ] as const;
  const issues: Issue[] = [];
  for (const [option, names] of options) {
    for (const name of names) {
      if (listed.has(name)) continue;
      const bare = o.prefix !== '' && name.startsWith(o.prefix) ? name.slice(o.prefix.length) : undefined;
      const hint = bare !== undefined && listed.has(bare) ? ` (these options take the server's names, without prefix: ${bare})` : '';
      issues.push({ path: [option], message: `the server lists no tool named ${name}${hint}` });
    }
  }
  return issues;
}

type Validate = (input: unknown) => { valid: boolean; errorMessage?: string | undefined };

/** The tool's input schema compiled, or why it is refused. */
function compile(validator: JsonSchemaValidatorLike, info: McpToolInfo): Validate | string {
  const s = info.inputSchema as unknown;
  if (typeof s !== 'object' || s === null || Array.isArray(s)) return 'the input schema is not a JSON object';
  if ((s as { type?: unknown }).type !== 'object')
    return (
      `the input schema's type must be "object" (MCP tools take their arguments as an object), ` +
      `not ${JSON.stringify((s as { type?: unknown }).type)}`
    );
  try {
    return validator.getValidator(s as never);
  } catch (e) {
    return `the input schema is not a valid JSON Schema: ${(e as Error)?.message ?? String(e)}`;
  }
}

async function defaultValidator(): Promise<JsonSchemaValidatorLike> {
  let mod: { AjvJsonSchemaValidator: new () => JsonSchemaValidatorLike };
  try {
    mod = (await import('@modelcontextprotocol/sdk/validation/ajv')) as unknown as typeof mod;
  } catch (e) {
    throw new ValidationError('mcpTools', [
      {
        path: [],
        message:
          `mcpTools needs the optional peer dependency @modelcontextprotocol/sdk (npm install @modelcontextprotocol/sdk): ` +
          `${(e as Error).message}`,
      },
    ]);
  }
  return new mod.AjvJsonSchemaValidator();
}

function toolFor(
  info: McpToolInfo,
  name: string,
  validate: Validate,
  conn: McpConnection,
  validator: JsonSchemaValidatorLike,
  o: ResolvedMcpOptions,
  list: ToolList,
): AnyTool {
  const parallel = o.parallel.includes(info.name) || (o.trustAnnotations && info.annotations?.readOnlyHint === true);
  const schema = { ...info.inputSchema };
  delete schema.$schema;
  const parameters = z.record(z.string(), z.unknown()).superRefine((v, ctx) => {
    const r = validate(v);
    if (!r.valid) ctx.addIssue({ code: 'custom', message: r.errorMessage ?? 'does not match the schema' });
  });
  const reconcileWith = async (args: Record<string, unknown>, ctx: ToolContext): Promise<ToolOutcomeInput | undefined> => {
    if (!o.reconcile) return undefined;
    let client: McpClientLike | undefined;
    try {
      client = (await conn.get()).client;
    } catch {
      client = undefined;
    }
    try {
      return (
        (await o.reconcile({ tool: info.name, arguments: args, idempotencyKey: ctx.idempotencyKey, ...(client ? { client } : {}) }, ctx)) ??
        undefined
      );
    } catch {
      return undefined;
    }
  };
  const target: CallTarget = {
    conn,
    tool: info.name,
    listedSchema: JSON.stringify(info.inputSchema),
    parallel,
    validator,
    ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}),
    reconcile: reconcileWith,
  };
  const tool: ToolDefinition<Record<string, unknown>> = {
    name,
    description: info.description ?? info.title ?? info.name,
    parameters,
    mode: parallel ? 'parallel' : 'exclusive',
    resources: [...(o.resources?.get(info.name) ?? [])],
    ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}),
    ...(o.needsApproval.includes(info.name) ? { needsApproval: true } : {}),
    spec: { name, description: info.description ?? info.title ?? info.name, parameters: schema },
    revision: () => conn.revision,
    list,
    execute: (args, ctx) => callTool(target, args, ctx),
    // only with the option: a tool with a `reconcile` is one recovery (and its preview) asks
    ...(o.reconcile ? { reconcile: (args: Record<string, unknown>, ctx: ToolContext) => reconcileWith(args, ctx) } : {}),
  };
  return tool;
}

const errorResult = (content: string): ToolOutcomeInput => ({ kind: 'completed', content, isError: true });

/** What a call of one listed tool needs. */
interface CallTarget {
  conn: McpConnection;
  /** The server's name of the tool. */
  tool: string;
  /** Its input schema as listed when the tool was offered (JSON). */
  listedSchema: string;
  parallel: boolean;
  validator: JsonSchemaValidatorLike;
  timeoutMs?: number;
  reconcile: (args: Record<string, unknown>, ctx: ToolContext) => Promise<ToolOutcomeInput | undefined>;
}

async function callTool(target: CallTarget, args: Record<string, unknown>, ctx: ToolContext): Promise<ToolOutcomeInput> {
  const { conn, tool, listedSchema, parallel, reconcile } = target;
  // a request not sent (or refused unprocessed: a session the server no longer knows) is sent
  // again on a new connection, once; a parallel (side-effect free) call also after a drop
  for (let attempt = 1; ; attempt++) {
    let link: Link;
    try {
      link = await conn.get();
    } catch (e) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      return errorResult(`could not reach the MCP server: ${(e as Error)?.message ?? String(e)} (the call was not sent)`);
    }
    const now = conn.catalog.get(tool);
    if (!now) return errorResult(`the MCP server no longer offers the tool ${tool} (the call was not sent)`);
    if (JSON.stringify(now.inputSchema) !== listedSchema) {
      return errorResult(
        `the MCP server changed the input schema of ${tool} after this attempt was offered the tool (the call was not sent); ` +
          `the next attempt is offered it as it is now`,
      );
    }
    let raw: unknown;
    try {
      const request = sendCall(
        link.client,
        { name: tool, arguments: args, _meta: { [IDEMPOTENCY_META_KEY]: ctx.idempotencyKey } },
        {
          signal: ctx.signal,
          resetTimeoutOnProgress: true,
          ...(target.timeoutMs !== undefined ? { timeout: target.timeoutMs + 60_000 } : {}),
        },
      );
      raw = await Promise.race([request, link.dropped]);
    } catch (e) {
      if (ctx.signal.aborted) {
        if (parallel) throw ctx.signal.reason;
        // the server was told to stop (notifications/cancelled), but it may have run the call
        return {
          kind: 'cancelled',
          settled: false,
          partialContent:
            `aborted (${(ctx.signal.reason as Error)?.message ?? 'cancelled'}); ` +
            `the MCP server was asked to stop, but whether the call took effect is unknown`,
        };
      }
      const failure = classifyFailure(e);
      const message = (e as Error)?.message ?? String(e);
      if (failure === 'refused') return errorResult(`the MCP server refused the call: ${message}`);
      if (failure === 'session-gone' || failure === 'not-sent' || parallel) {
        conn.discard(link);
        if (attempt < 2 && conn.reconnects) continue;
        return errorResult(`the call to the MCP server failed: ${message}${failure === 'dropped' ? '' : ' (the call was not sent)'}`);
      }
      conn.discard(link);
      const known = await reconcile(args, ctx);
      if (known !== undefined) return known;
      return {
        kind: 'uncertain-hanging',
        content:
          `the connection to the MCP server dropped while ${tool} was running (${message}); ` +
          `whether it ran or took effect is unknown, and it was not sent again`,
      };
    }
    // the server answered: whatever its result holds, the call ran (read outside the try: a
    // result hard to read is never taken for a failure of the call)
    return readResult(now, raw, target.validator, await callResultSchema());
  }
}
