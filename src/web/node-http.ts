import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { parseInput } from '../contracts/validate.js';

/**
 * `nodeListener` options (unknown keys are refused).
 * @example
 * http.createServer(nodeListener(handle, { origin: 'https://chat.example.com' }))
 */
export const NodeListenerOptions = z.strictObject({
  /** The origin the request URLs get (default: `http://` + the request's Host header): http or https. */
  origin: z.url({ protocol: /^https?$/, error: 'an http(s) origin such as https://chat.example.com' }).optional(),
});
export type NodeListenerOptions = z.input<typeof NodeListenerOptions>;

/**
 * Mounts a fetch-style handler (`webHandler`, `sessionEvents`) on Node's http server: the request
 * becomes a web `Request` (aborted when the client goes away), the `Response` body is written
 * with backpressure (a client that does not read makes the stream's queue fill, and `capacity`
 * applies), and a closed connection cancels it.
 * @example
 * http.createServer(nodeListener(webHandler({ runtime }))).listen(3000)
 */
export function nodeListener(handler: (request: Request) => Promise<Response> | Response, options: NodeListenerOptions = {}) {
  const o = parseInput(NodeListenerOptions, options, 'nodeListener');
  const origin = o.origin === undefined ? undefined : new URL(o.origin).origin;
  return (req: IncomingMessage, res: ServerResponse): void => {
    void serve(handler, req, res, origin).catch((e: Error) => {
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json; charset=utf-8' });
        res.end(JSON.stringify({ error: 'Error', message: e.message }));
      } else res.destroy(e);
    });
  };
}

async function serve(
  handler: (request: Request) => Promise<Response> | Response,
  req: IncomingMessage,
  res: ServerResponse,
  origin?: string,
): Promise<void> {
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
  }
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  const body = hasBody ? bodyOf(req) : undefined;
  const request = new Request(urlOf(req, origin), {
    method: req.method ?? 'GET',
    headers,
    signal: abort.signal,
    ...(body ? { body: body.stream, duplex: 'half' } : {}),
  } as RequestInit);
  const response = await handler(request);
  const out: Record<string, string> = Object.fromEntries(response.headers); // own keys, whatever the header names
  // a body the handler stopped reading (too large) is never read further: the connection closes after the answer
  if (body && !body.ended()) out.connection = 'close';
  res.writeHead(response.status, out);
  if (!response.body) return void res.end();
  if (response.headers.get('content-type')?.startsWith('text/event-stream')) res.flushHeaders();
  const reader = response.body.getReader();
  abort.signal.addEventListener('abort', () => void reader.cancel().catch(() => undefined), { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (!res.write(value)) {
        await new Promise<void>((r) => {
          const done = () => {
            res.off('drain', done);
            res.off('close', done);
            r();
          };
          res.on('drain', done);
          res.on('close', done);
        });
      }
      if (abort.signal.aborted) break;
    }
  } catch {
    // the client went away
  }
  res.end();
}

/**
 * The request's URL: its target's path and query on `origin`, else on the Host header — an
 * absolute-form target (`GET http://host/path`) on its own origin, credentials dropped (RFC 9112
 * §3.2.2). A Host that is not a host name (`a:1.evil.com`, `a@b`, empty) gets the placeholder
 * `invalid.invalid`: the header itself still goes to the handler, whose `allowedHosts` check
 * refuses it (403), never a URL that cannot be built (500).
 */
function urlOf(req: IncomingMessage, origin: string | undefined): URL {
  const target = req.url ?? '/';
  const absolute = target.startsWith('/') ? undefined : URL.parse(target);
  const path = absolute ? (absolute.pathname.startsWith('/') ? absolute.pathname + absolute.search : '/') : target === '*' ? '/*' : target;
  // (appended, not resolved: a target `//x/y` stays a path, never a host)
  const base =
    origin ??
    (absolute?.protocol === 'http:' || absolute?.protocol === 'https:' ? absolute.origin : `http://${hostOrPlaceholder(req.headers.host)}`);
  return URL.parse(base + (path.startsWith('/') ? path : `/${path}`)) ?? new URL('/', base);
}

/** The Host header when a URL can carry it as its host (a name or address, an optional port), else `invalid.invalid`. */
function hostOrPlaceholder(host: string | undefined): string {
  const u = host === undefined ? undefined : URL.parse(`http://${host}/`);
  return u && u.username === '' && u.password === '' && u.pathname === '/' && u.search === '' && u.hash === '' ? host! : 'invalid.invalid';
}

/**
 * The request body as a web stream that reads the socket only as fast as it is read (a bounded
 * queue: 64 KiB), and stops reading when cancelled (the connection is then closed after the
 * response, never drained).
 */
function bodyOf(req: IncomingMessage): { stream: ReadableStream<Uint8Array>; ended(): boolean } {
  let ended = false;
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        req.on('data', (chunk: Buffer) => {
          if (cancelled) return;
          c.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
          if ((c.desiredSize ?? 0) <= 0) req.pause();
        });
        req.once('end', () => {
          ended = true;
          if (!cancelled) c.close();
        });
        req.once('error', (e) => {
          if (!cancelled && !ended) c.error(e);
        });
        req.pause();
      },
      pull() {
        req.resume();
      },
      cancel() {
        cancelled = true;
        req.pause();
      },
    },
    { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength },
  );
  return { stream, ended: () => ended };
}
