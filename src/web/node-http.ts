import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * Mounts a fetch-style handler (`webHandler`, `sessionEvents`) on Node's http server: the request
 * becomes a web `Request` (aborted when the client goes away), the `Response` body is written
 * with backpressure (a client that does not read makes the stream's queue fill, and `capacity`
 * applies), and a closed connection cancels it.
 * @example
 * http.createServer(nodeListener(webHandler({ runtime }))).listen(3000)
 */
export function nodeListener(handler: (request: Request) => Promise<Response> | Response, options: { origin?: string } = {}) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    void serve(handler, req, res, options.origin).catch((e: Error) => {
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json; charset=utf-8' });
        res.end(JSON.stringify({ error: 'Error', message: e.message }));
      } else res.destroy(e);
    });
  };
}

async function serve(handler: (request: Request) => Promise<Response> | Response, req: IncomingMessage, res: ServerResponse, origin?: string): Promise<void> {
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  const base = origin ?? `http://${req.headers.host ?? 'localhost'}`;
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
  }
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  const request = new Request(new URL(req.url ?? '/', base), {
    method: req.method ?? 'GET',
    headers,
    signal: abort.signal,
    ...(hasBody ? { body: req as unknown as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
  } as RequestInit);
  const response = await handler(request);
  res.writeHead(response.status, Object.fromEntries(response.headers)); // own keys, whatever the header names
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
