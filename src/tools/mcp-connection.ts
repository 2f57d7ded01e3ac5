import { DroppedError, type McpClientLike, type McpToolInfo } from './mcp-client.js';
import { catalogRevision, listAll, type Listing } from './mcp-list.js';

/** One live client: `dropped` settles (rejects) when its connection closes or its stream breaks. */
export interface Link {
  client: McpClientLike;
  dropped: Promise<never>;
  isDropped(): boolean;
  /** The server announced a change of its tool list (`notifications/tools/list_changed`) not read yet. */
  listChanged: boolean;
}

const LIST_CHANGED = 'notifications/tools/list_changed';

/**
 * The adapter's connection to one MCP server: connects (through the factory) when first used and
 * again after a drop, and keeps the tool list the server gave last, with its revision (a digest
 * that changes when the list changes). The list is read at each connect and again whenever the
 * server announces a change (`notifications/tools/list_changed`), one read at a time.
 */
export class McpConnection {
  private link?: Link;
  private connecting?: Promise<Link>;
  /** The link whose list is being read again. */
  private reading?: Link;
  /** The last list read. */
  listing: Listing = { tools: [], refused: [] };
  /** Its tools that fit the MCP schema, by name. */
  catalog = new Map<string, McpToolInfo>();
  revision = '';
  /** Contract: called with every list read (a connect's, or one the server announced); must not throw. */
  onList?: (listing: Listing) => void;
  /** Contract: called when a list the server announced cannot be read (the connection still up); must not throw. */
  onListError?: (error: unknown) => void;

  constructor(private readonly source: McpClientLike | (() => Promise<McpClientLike>)) {}

  get reconnects(): boolean {
    return typeof this.source === 'function';
  }

  /** The live link, connecting when there is none (or the last one dropped and a factory can make another). */
  get(): Promise<Link> {
    if (this.link && !this.link.isDropped()) return Promise.resolve(this.link);
    if (this.link && !this.reconnects)
      return Promise.reject(new Error('the connection to the MCP server is closed (pass a client factory to mcpTools to reconnect)'));
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
    // heard before the list is read: a change announced while it is read is read again after
    onListChanged(client, await listChangedSchema(), () => {
      link.listChanged = true;
      this.readAgain(link);
    });
    let listing: Listing;
    try {
      listing = await listAll(client);
    } catch (e) {
      // a client the factory made for this connect is closed, not left running
      if (this.reconnects) void client.close().catch(() => {});
      throw e;
    }
    this.link = link;
    this.apply(listing);
    this.readAgain(link);
    return link;
  }

  private apply(listing: Listing): void {
    this.listing = listing;
    this.catalog = new Map(listing.tools.map((t) => [t.name, t]));
    this.revision = catalogRevision(listing);
    this.onList?.(listing);
  }

  /**
   * Reads the list of `link`'s server again if it announced a change (while `link` is the live
   * link; an old link's list is not wanted, a new one's is read when it connects); one read at a
   * time, and a change announced during a read is read after it.
   */
  private readAgain(link: Link): void {
    if (this.link !== link || this.reading === link || !link.listChanged || link.isDropped()) return;
    link.listChanged = false;
    this.reading = link;
    listAll(link.client)
      .then((listing) => {
        if (this.link === link) this.apply(listing);
      })
      .catch((e: unknown) => {
        // a dropped connection's list is read when it connects again
        if (this.link === link && !link.isDropped()) this.onListError?.(e);
      })
      .finally(() => {
        if (this.reading === link) this.reading = undefined;
        this.readAgain(link);
      });
  }
}

let listChangedLoad: Promise<unknown> | undefined;

/** The SDK's `ToolListChangedNotificationSchema` (loaded on first use), or undefined without the SDK. */
function listChangedSchema(): Promise<unknown> {
  return (listChangedLoad ??= import('@modelcontextprotocol/sdk/types.js').then(
    (m) => (m as { ToolListChangedNotificationSchema?: unknown }).ToolListChangedNotificationSchema,
    () => undefined,
  ));
}

/**
 * Hears `notifications/tools/list_changed` on `client`. The SDK keeps one handler per
 * notification: a handler already set (yours, or the one the Client's `listChanged` option sets)
 * is called after `heard`. A client without `setNotificationHandler` is never heard.
 */
function onListChanged(client: McpClientLike, schema: unknown, heard: () => void): void {
  if (schema === undefined || typeof client.setNotificationHandler !== 'function') return;
  const handlers = (client as { _notificationHandlers?: unknown })._notificationHandlers;
  const previous = handlers instanceof Map ? (handlers.get(LIST_CHANGED) as ((n: unknown) => unknown) | undefined) : undefined;
  client.setNotificationHandler(schema as never, (notification: never) => {
    heard();
    return typeof previous === 'function' ? (previous(notification) as Promise<void> | void) : undefined;
  });
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
    if (/SSE stream disconnected|terminated|ECONNRESET|socket hang up/i.test(e?.message ?? ''))
      drop(`the connection to the MCP server broke: ${e.message}`);
    prevError?.(e);
  };
  return { client, dropped: droppedP, isDropped: () => dropped, listChanged: false };
}
