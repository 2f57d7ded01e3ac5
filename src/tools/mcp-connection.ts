import { createHash } from 'node:crypto';
import { DroppedError, type McpClientLike, type McpToolInfo } from './mcp-client.js';

/** One live client: `dropped` settles (rejects) when its connection closes or its stream breaks. */
export interface Link {
  client: McpClientLike;
  dropped: Promise<never>;
  isDropped(): boolean;
}

/**
 * The adapter's connection to one MCP server: connects (through the factory) when first used and
 * again after a drop, and keeps the tool list the server gave at the newest connect, with its
 * revision (a digest that changes when the list changes).
 */
export class McpConnection {
  private link?: Link;
  private connecting?: Promise<Link>;
  catalog = new Map<string, McpToolInfo>();
  revision = '';

  constructor(private readonly source: McpClientLike | (() => Promise<McpClientLike>)) {}

  get reconnects(): boolean {
    return typeof this.source === 'function';
  }

  /** The live link, connecting when there is none (or the last one dropped and a factory can make another). */
  get(): Promise<Link> {
    if (this.link && !this.link.isDropped()) return Promise.resolve(this.link);
    if (this.link && !this.reconnects) return Promise.reject(new Error('the connection to the MCP server is closed (pass a client factory to mcpTools to reconnect)'));
    this.connecting ??= this.open().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  /** Forgets `old` (it failed in a way that needs a new session): the next `get` connects again. */
  discard(old: Link): void {
    if (this.link !== old) return;
    if (!this.reconnects) return;
    this.link = undefined;
    void old.client.close().catch(() => {});
  }

  /** Closes a client the factory made (a client passed in stays its owner's). */
  async close(): Promise<void> {
    const l = this.link;
    this.link = undefined;
    if (l && this.reconnects) await l.client.close().catch(() => {});
  }

  private async open(): Promise<Link> {
    const previous = this.link;
    this.link = undefined;
    if (previous) void previous.client.close().catch(() => {});
    const client = typeof this.source === 'function' ? await this.source() : this.source;
    const link = watch(client);
    const tools = await listAll(client);
    this.catalog = new Map(tools.map((t) => [t.name, t]));
    this.revision = catalogRevision(tools);
    this.link = link;
    return link;
  }
}

/** Every page of `tools/list`. */
export async function listAll(client: McpClientLike): Promise<McpToolInfo[]> {
  const tools: McpToolInfo[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < 1000; page++) {
    const res = await client.listTools(cursor === undefined ? undefined : { cursor });
    tools.push(...res.tools);
    cursor = res.nextCursor;
    if (!cursor) break;
  }
  return tools;
}

/** sha256 of the list's names, descriptions, schemas and annotations, in name order. */
export function catalogRevision(tools: readonly McpToolInfo[]): string {
  const rows = [...tools]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((t) => [t.name, t.description ?? '', t.inputSchema, t.annotations ?? {}]);
  return createHash('sha256').update(JSON.stringify(rows)).digest('hex');
}

/**
 * Hooks the client's `onclose` and `onerror` (keeping the ones already set): a closed transport,
 * or a response stream broken mid-call (Streamable HTTP reports it only through `onerror`, and the
 * request would otherwise wait for its timeout), drops the link.
 */
function watch(client: McpClientLike): Link {
  let dropped = false;
  let fail: (e: Error) => void = () => {};
  const droppedP = new Promise<never>((_, reject) => {
    fail = reject;
  });
  droppedP.catch(() => {}); // observed by the calls racing it
  const drop = (why: string) => {
    if (dropped) return;
    dropped = true;
    fail(new DroppedError(why));
  };
  const prevClose = client.onclose;
  client.onclose = () => {
    drop('the connection to the MCP server closed');
    prevClose?.();
  };
  const prevError = client.onerror;
  client.onerror = (e: Error) => {
    if (/SSE stream disconnected|terminated|ECONNRESET|socket hang up/i.test(e?.message ?? '')) drop(`the connection to the MCP server broke: ${e.message}`);
    prevError?.(e);
  };
  return { client, dropped: droppedP, isDropped: () => dropped };
}
