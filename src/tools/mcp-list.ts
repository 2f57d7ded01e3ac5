import { createHash } from 'node:crypto';
import { z } from 'zod';
import { ValidationError } from '../contracts/errors.js';
import type { McpClientLike, McpToolInfo } from './mcp-client.js';

/** A listed tool the MCP schema refuses: its name (or `#<position>` without one), where and why. */
export interface RefusedTool {
  name: string;
  path: (string | number)[];
  message: string;
}

/** A tool list as read: the tools the MCP schema accepts, and the ones it refuses. */
export interface Listing {
  tools: McpToolInfo[];
  refused: RefusedTool[];
}

/** The SDK's `ToolSchema` (one tool of `tools/list`), loaded on first use; undefined without the SDK. */
type Issue = { path: readonly PropertyKey[]; message: string };
type SchemaLike = { safeParse(v: unknown): { success: true; data: unknown } | { success: false; error: { issues: readonly Issue[] } } };
let toolSchemaLoad: Promise<SchemaLike | undefined> | undefined;
const toolSchema = (): Promise<SchemaLike | undefined> =>
  (toolSchemaLoad ??= import('@modelcontextprotocol/sdk/types.js').then(
    (m) => (m as { ToolSchema?: SchemaLike }).ToolSchema,
    () => undefined,
  ));

/** A page of `tools/list` read without the SDK's check, so that one bad tool can be named. */
const RawPage = z.looseObject({ tools: z.array(z.unknown()), nextCursor: z.string().optional() });

/** The SDK refused the response's shape (its result schema failed): a zod error, not a protocol one. */
const isShapeError = (e: unknown): boolean => {
  const err = e as { issues?: unknown; name?: unknown } | undefined;
  return Array.isArray(err?.issues) && /ZodError/.test(String(err.name));
};

/**
 * Every page of `tools/list`. The SDK's `listTools` refuses a whole page when one tool does not fit
 * the MCP schema (an input schema whose `type` is not `"object"`, say) with a bare zod error that
 * names no tool; such a page is read again as it is, and each tool checked on its own with the
 * SDK's `ToolSchema`: the ones that fit are listed, the others come back refused, by name.
 */
export async function listAll(client: McpClientLike): Promise<Listing> {
  const tools: McpToolInfo[] = [];
  const refused: RefusedTool[] = [];
  let cursor: string | undefined;
  let listed = 0;
  for (let page = 0; page < 1000; page++) {
    const params = cursor === undefined ? undefined : { cursor };
    let res: { tools: McpToolInfo[]; nextCursor?: string | undefined; size?: number };
    try {
      res = await client.listTools(params);
    } catch (e) {
      const schema = isShapeError(e) && typeof client.request === 'function' ? await toolSchema() : undefined;
      if (!schema) throw e;
      res = await readPage(client, schema, params, listed, refused);
    }
    listed += res.size ?? res.tools.length;
    tools.push(...res.tools);
    cursor = res.nextCursor;
    if (!cursor) break;
  }
  return { tools, refused };
}

/**
 * One page read as it is: the tools that fit are returned (`size`: how many it lists), the others
 * pushed onto `refused` (`before`: how many tools earlier pages listed).
 */
async function readPage(
  client: McpClientLike,
  schema: SchemaLike,
  params: { cursor: string } | undefined,
  before: number,
  refused: RefusedTool[],
): Promise<{ tools: McpToolInfo[]; nextCursor?: string | undefined; size: number }> {
  const raw = await client.request!({ method: 'tools/list', ...(params ? { params } : {}) }, z.unknown() as never);
  const page = RawPage.safeParse(raw);
  if (!page.success) {
    const issues = page.error.issues.map((i) => ({ path: ['tools/list', ...i.path.map(String)], message: i.message }));
    throw new ValidationError("mcpTools: the server's tool list", issues);
  }
  const tools: McpToolInfo[] = [];
  page.data.tools.forEach((t, i) => {
    const given = (t as { name?: unknown } | null)?.name;
    const name = typeof given === 'string' ? given : `#${before + i}`;
    const checked = schema.safeParse(t);
    if (checked.success) tools.push(checked.data as McpToolInfo);
    else for (const issue of checked.error.issues) refused.push({ name, path: issue.path.map(String), message: explain(issue, t) });
  });
  // the SDK's listTools records the tools' output schemas, which its callTool checks results against
  (client as { cacheToolMetadata?: (tools: McpToolInfo[]) => void }).cacheToolMetadata?.(tools);
  return { tools, nextCursor: page.data.nextCursor, size: page.data.tools.length };
}

/** What is wrong with a listed tool, in the terms the adapter's docs use. */
function explain(issue: Issue, tool: unknown): string {
  if (issue.path.length === 2 && issue.path[0] === 'inputSchema' && issue.path[1] === 'type') {
    const type = (tool as { inputSchema: { type?: unknown } }).inputSchema.type;
    const given = type === undefined ? 'missing' : JSON.stringify(type);
    return `the input schema's type must be "object" (MCP tools take their arguments as an object), not ${given}`;
  }
  return `does not fit the MCP schema of a tool: ${issue.message}`;
}

/** sha256 of the list's names, descriptions, schemas and annotations, in name order (and of the tools refused, if any). */
export function catalogRevision(listing: Listing): string {
  const rows = [...listing.tools]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((t) => [t.name, t.description ?? '', t.inputSchema, t.annotations ?? {}]);
  const refused = listing.refused.map((r) => [r.name, r.message]);
  return createHash('sha256')
    .update(JSON.stringify(refused.length > 0 ? [rows, refused] : rows))
    .digest('hex');
}
