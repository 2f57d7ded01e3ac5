import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { ModelProvider, ModelRequest, ModelStreamEvent } from '../../src/contracts/model.js';

/** One Server-Sent Event as written on the wire: `event: <name>` (optional) and `data: <data>`. */
export interface SseEvent {
  event?: string;
  data: string;
}

/**
 * What the server answers to one request, consumed in order.
 * - `sse`: a 200 `text/event-stream` response. `delayMs` waits before each event (a slow stream);
 *   `cutAfter` destroys the socket after that many events (a stream broken mid-way);
 *   `headersDelayMs` waits before sending the headers (for client timeouts); `headers` are sent
 *   with it (the provider's rate headers, …).
 * - `status`: an HTTP error with a JSON body (a string: sent as it is, as HTML) and extra headers (`retry-after`, …).
 */
export type Reply =
  | { kind: 'sse'; events: SseEvent[]; delayMs?: number; cutAfter?: number; headersDelayMs?: number; headers?: Record<string, string> }
  | { kind: 'status'; status: number; body: unknown; headers?: Record<string, string> };

/** A request as the server received it. `clientClosed` turns true when the client hung up early. */
export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: any;
  clientClosed: boolean;
}

/** A scriptable local HTTP server replaying a provider's streaming wire format. */
export interface ScriptedServer {
  /** `http://127.0.0.1:<port>` followed by the base path given to `startSseServer`. */
  readonly baseURL: string;
  readonly requests: RecordedRequest[];
  /** Queues replies; each incoming request takes the next one (none left → 500). */
  reply(...replies: Reply[]): void;
  /** The last request's JSON body. */
  lastBody(): any;
  /** Forgets the recorded requests and any reply not yet taken. */
  reset(): void;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function writeSse(res: ServerResponse, socket: Socket, reply: Extract<Reply, { kind: 'sse' }>, rec: RecordedRequest) {
  if (reply.headersDelayMs) await sleep(reply.headersDelayMs);
  if (rec.clientClosed) return;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-request-id': 'req_test', ...reply.headers });
  res.flushHeaders();
  let sent = 0;
  for (const e of reply.events) {
    if (reply.cutAfter !== undefined && sent >= reply.cutAfter) break;
    if (reply.delayMs) await sleep(reply.delayMs);
    if (rec.clientClosed || res.destroyed) return;
    res.write(`${e.event ? `event: ${e.event}\n` : ''}data: ${e.data}\n\n`);
    sent++;
  }
  if (reply.cutAfter !== undefined) {
    // Let the written chunks reach the client, then break the connection without the final chunk.
    await sleep(20);
    socket.destroy();
    return;
  }
  res.end();
}

/**
 * Starts a server on 127.0.0.1 (a free port) that records every request body and answers with the
 * queued replies.
 * @example
 * const server = await startSseServer('/v1'); server.reply({ kind: 'status', status: 500, body: {} })
 */
export async function startSseServer(basePath: string): Promise<ScriptedServer> {
  const queue: Reply[] = [];
  const requests: RecordedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const rec: RecordedRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: text ? JSON.parse(text) : undefined,
        clientClosed: false,
      };
      requests.push(rec);
      res.on('close', () => {
        if (!res.writableFinished) rec.clientClosed = true;
      });
      const reply = queue.shift();
      if (!reply) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'no scripted reply left', type: 'test_error' } }));
        return;
      }
      if (reply.kind === 'status') {
        // a string body goes as it is (a gateway's HTML page), anything else as JSON
        const raw = typeof reply.body === 'string';
        res.writeHead(reply.status, { 'content-type': raw ? 'text/html' : 'application/json', ...reply.headers });
        res.end(raw ? reply.body : JSON.stringify(reply.body));
        return;
      }
      void writeSse(res, req.socket, reply, rec).catch(() => req.socket.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}${basePath}`,
    requests,
    reply: (...replies) => void queue.push(...replies),
    lastBody: () => requests.at(-1)?.body,
    reset: () => {
      requests.length = 0;
      queue.length = 0;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Calls `model` and records the stream events it emits. */
export function callModel(model: ModelProvider, request: Partial<ModelRequest> = {}) {
  const events: ModelStreamEvent[] = [];
  const response = model.call(
    { messages: [{ role: 'user', content: 'hi' }], tools: [], signal: new AbortController().signal, ...request },
    (e) => void events.push(e),
  );
  return { events, response };
}

/** The error a promise rejects with (fails the test when it resolves). */
export async function failureOf(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

/** A port on 127.0.0.1 nothing listens on (connection refused). */
export async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Calls `model`, aborting the signal from inside the first delta; returns the error and every text delta seen. */
export async function abortOnFirstDelta(model: ModelProvider) {
  const ac = new AbortController();
  const seen: string[] = [];
  const error = await failureOf(
    model.call({ messages: [{ role: 'user', content: 'hi' }], tools: [], signal: ac.signal }, (e) => {
      if (e.type === 'text_delta') seen.push(e.text);
      ac.abort();
    }),
  );
  return { error, seen };
}
