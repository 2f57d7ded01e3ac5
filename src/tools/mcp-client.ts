import { z } from 'zod';

/**
 * The parts of an MCP client (`Client` of `@modelcontextprotocol/sdk`) the adapter uses, as
 * structural types: importing the package root never needs the SDK (an optional peer), and the
 * SDK's `Client` fits these without a cast.
 */

export interface McpRequestOptions {
  signal?: AbortSignal;
  timeout?: number;
  resetTimeoutOnProgress?: boolean;
}

/** One tool as `tools/list` describes it. */
export interface McpToolInfo {
  name: string;
  title?: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  /** The JSON Schema its results' `structuredContent` is declared to match. */
  outputSchema?: Record<string, unknown>;
  annotations?: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean; openWorldHint?: boolean; title?: string };
}

/** A `tools/call` result (`toolResult` is the protocol's older compatibility shape). */
export interface McpCallResult {
  content?: unknown[];
  structuredContent?: unknown;
  isError?: boolean;
  toolResult?: unknown;
}

/** The requests the adapter sends through `request`. */
export type McpRawRequest = { method: 'tools/list'; params?: { cursor?: string } } | { method: 'tools/call'; params: McpCallParams };

/** A `tools/call` request's params. */
export interface McpCallParams {
  name: string;
  arguments?: Record<string, unknown>;
  _meta?: Record<string, unknown>;
}

export interface McpClientLike {
  listTools(params?: { cursor?: string }, options?: McpRequestOptions): Promise<{ tools: McpToolInfo[]; nextCursor?: string }>;
  callTool(params: McpCallParams, resultSchema?: undefined, options?: McpRequestOptions): Promise<McpCallResult>;
  close(): Promise<void>;
  /**
   * The SDK's raw request: used to send `tools/call` (the SDK's `callTool` throws away a result
   * that does not match the tool's output schema, after the call ran), and to read a `tools/list`
   * page again when `listTools` refuses it as a whole (one tool not fitting the MCP schema), so
   * that the bad tool can be named. A client without it is called through `callTool`.
   */
  request?(request: McpRawRequest, resultSchema: never, options?: McpRequestOptions): Promise<unknown>;
  onclose?: (() => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
  /** The SDK's, used with its `ToolListChangedNotificationSchema` to hear `notifications/tools/list_changed`. */
  setNotificationHandler?(schema: never, handler: (notification: never) => void | Promise<void>): void;
}

/**
 * Sends `tools/call`, answering the response as the server sent it. Through the client's raw
 * `request`, not its `callTool`: `callTool` checks the result against the tool's output schema
 * and throws an McpError when it does not match, and `request` with the SDK's result schema
 * throws a zod error for a result that does not fit it — both after the server ran the call, and
 * both would read as a failure of the call (refused, or dropped). The result is read and checked
 * by `readResult`. The SDK's timeout and cancellation are `request`'s own (`callTool` passes its
 * options on). A client without `request` is called through `callTool`.
 */
export async function sendCall(client: McpClientLike, params: McpCallParams, options: McpRequestOptions): Promise<unknown> {
  if (typeof client.request !== 'function') return client.callTool(params, undefined, options);
  return client.request({ method: 'tools/call', params }, z.unknown() as never, options);
}

/** A structural `jsonSchemaValidator` of the SDK (`@modelcontextprotocol/sdk/validation`). */
export interface JsonSchemaValidatorLike {
  getValidator(schema: never): (input: unknown) => { valid: boolean; errorMessage?: string | undefined };
}

/**
 * How a failed `tools/call` is read:
 * - `refused`: the server answered with a JSON-RPC error (or an HTTP 4xx): the call did not run;
 * - `not-sent`: the request never left (not connected, connection refused): safe to send again;
 * - `session-gone`: HTTP 404 on the session id (the server restarted or ended the session): the
 *   spec says the request was not processed and a new session must be started;
 * - `dropped`: the connection broke (or the request timed out) after the request was sent:
 *   whether the tool ran is unknown.
 */
export type CallFailure = 'refused' | 'not-sent' | 'session-gone' | 'dropped';

const CONNECTION_CLOSED = -32000;
const REQUEST_TIMEOUT = -32001;

export function classifyFailure(e: unknown): CallFailure {
  if (e instanceof DroppedError) return 'dropped';
  const err = e as { name?: unknown; code?: unknown; message?: unknown; cause?: { code?: unknown } } | undefined;
  const message = typeof err?.message === 'string' ? err.message : '';
  const code = typeof err?.code === 'number' ? err.code : undefined;
  if (message.startsWith('Streamable HTTP error')) {
    if (code === 404) return 'session-gone';
    return code !== undefined && code >= 400 && code < 500 ? 'refused' : 'dropped';
  }
  if (err?.name === 'McpError' && code !== undefined) {
    return code === CONNECTION_CLOSED || code === REQUEST_TIMEOUT ? 'dropped' : 'refused';
  }
  if (message === 'Not connected') return 'not-sent';
  if (err?.cause?.code === 'ECONNREFUSED' || (err as { code?: unknown })?.code === 'ECONNREFUSED') return 'not-sent';
  return 'dropped';
}

/** The connection to the server broke while a call was in flight. */
export class DroppedError extends Error {
  override readonly name = 'DroppedError';
}
