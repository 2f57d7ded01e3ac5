import { z } from 'zod';
import { isStoreClosedError, isValidationError, ValidationError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import type { Runtime } from '../runtime/runtime.js';
import { CancelBody, MessageBody, RespondBody, StopBody, type InboxEntry, type InboxReceipt } from './inbox-contract.js';
import { errorResponse, sessionEvents, SessionEventsOptions } from './session-events.js';

export const WebHandlerOptions = z.strictObject({
  runtime: z.custom<Runtime>((v) => typeof v === 'object' && v !== null && typeof (v as Runtime).liveEnvelopes$ === 'function', 'a runtime (createRuntime)'),
  /** Where the routes are mounted, e.g. `/api` (default: the root). */
  basePath: z.string().regex(/^(\/[^/]+)*$/, 'empty or /segment(/segment)*').default(''),
  /** Largest request body accepted, in bytes. */
  maxBodyBytes: z.number().int().positive().max(64 * 1024 * 1024).default(1024 * 1024),
  /** Options of every event stream (capacity, heartbeat, polling). */
  stream: SessionEventsOptions.omit({ live: true }).partial().optional(),
});
export type WebHandlerOptions = z.input<typeof WebHandlerOptions>;

type Route = { body: z.ZodType; entry: (body: never) => InboxEntry };
const ROUTES = new Map<string, Route>([
  ['messages', { body: MessageBody, entry: (b: z.infer<typeof MessageBody>) => ({ kind: 'input', inputId: b.inputId, mode: 'follow_up', message: b.message }) }],
  ['steer', { body: MessageBody, entry: (b: z.infer<typeof MessageBody>) => ({ kind: 'input', inputId: b.inputId, mode: 'steer', message: b.message }) }],
  ['respond', { body: RespondBody, entry: (b: z.infer<typeof RespondBody>) => ({ kind: 'respond', ...b }) }],
  ['stop', { body: StopBody, entry: (b: z.infer<typeof StopBody>) => ({ kind: 'stop_after_round', ...b }) }],
  [
    'cancel',
    {
      body: CancelBody,
      entry: (b: z.infer<typeof CancelBody>) =>
        b.inputId !== undefined ? { kind: 'cancel_input', entryId: b.entryId, inputId: b.inputId } : { kind: 'cancel', entryId: b.entryId, ...(b.reason !== undefined ? { reason: b.reason } : {}) },
    },
  ],
]);

const SessionIdSegment = z.string().min(1).max(400);
const STATUS: Record<InboxReceipt['status'], number> = { accepted: 202, already_accepted: 200, refused: 409 };

/**
 * The session endpoints on web-standard Request/Response: `GET /sessions/:id/events` (the event
 * stream, `sessionEvents` with the session's live deltas when it runs in this process) and
 * `POST /sessions/:id/messages | steer | respond | stop | cancel`, each a JSON body checked with
 * zod and submitted to the inbox (`runtime.submit`), answered with the durable receipt
 * (202 accepted, 200 already accepted — the same id again —, 409 refused). Bad input is a 4xx
 * with `{ error, message, issues? }`; nothing is submitted.
 * @example
 * const handle = webHandler({ runtime })
 * // Node: http.createServer(nodeListener(handle)); Hono: app.all('/sessions/*', (c) => handle(c.req.raw))
 */
export function webHandler(options: WebHandlerOptions): (request: Request) => Promise<Response> {
  const o = parseInput(WebHandlerOptions, options, 'webHandler');
  const runtime = o.runtime;
  return async (request: Request) => {
    try {
      const path = new URL(request.url).pathname;
      if (!path.startsWith(`${o.basePath}/sessions/`)) return notFound(path);
      const parts = path.slice(o.basePath.length + '/sessions/'.length).split('/');
      if (parts.length !== 2) return notFound(path);
      let sessionId: string;
      try {
        sessionId = parseInput(SessionIdSegment, decodeURIComponent(parts[0]!), 'session id');
      } catch (e) {
        return errorResponse(400, isValidationError(e) ? e : new ValidationError('session id', [{ path: ['sessionId'], message: 'not a valid percent-encoded id' }]));
      }
      const action = parts[1]!;
      if (action === 'events') {
        if (request.method !== 'GET') return methodNotAllowed('GET');
        return sessionEvents(runtime.store, sessionId, request, { ...o.stream, live: runtime.liveEnvelopes$(sessionId) });
      }
      const route = ROUTES.get(action);
      if (!route) return notFound(path);
      if (request.method !== 'POST') return methodNotAllowed('POST');
      const body = await jsonBody(request, o.maxBodyBytes);
      if (body instanceof Response) return body;
      let entry: InboxEntry;
      try {
        entry = route.entry(parseInput(route.body, body, `POST ${action}`) as never);
      } catch (e) {
        return errorResponse(400, e);
      }
      const receipt = await runtime.submit(sessionId, entry);
      return json(STATUS[receipt.status], receipt);
    } catch (e) {
      if (isValidationError(e)) return errorResponse(400, e);
      if (isStoreClosedError(e)) return errorResponse(503, e);
      return errorResponse(500, { name: (e as Error).name ?? 'Error', message: (e as Error).message ?? String(e) });
    }
  };
}

async function jsonBody(request: Request, max: number): Promise<unknown> {
  const type = request.headers.get('content-type') ?? '';
  if (!/^application\/json\b/i.test(type)) return errorResponse(415, { name: 'UnsupportedMediaType', message: `send the body as application/json (got ${JSON.stringify(type.slice(0, 80))})` });
  const declared = Number(request.headers.get('content-length') ?? 0);
  if (declared > max) return tooLarge(max);
  const bytes = await readAtMost(request, max);
  if (bytes === undefined) return tooLarge(max);
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (e) {
    return errorResponse(400, new ValidationError('request body', [{ path: [], message: `not JSON: ${(e as Error).message}` }]));
  }
}

/**
 * The body's bytes, read as a stream and counted: undefined as soon as they pass `max`, when the
 * reader is cancelled and the rest is never read (a chunked body declares no length; buffering it
 * whole before comparing would let one request grow the server by its size).
 */
async function readAtMost(request: Request, max: number): Promise<Uint8Array | undefined> {
  if (!request.body) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > max) {
      void reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  return bytes;
}

const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' } });
const notFound = (path: string) => errorResponse(404, { name: 'NotFound', message: `no route ${path.slice(0, 200)}: the routes are /sessions/:id/{events,messages,steer,respond,stop,cancel}` });
const tooLarge = (max: number) => errorResponse(413, { name: 'PayloadTooLarge', message: `the body is larger than ${max} bytes` });
function methodNotAllowed(allow: string): Response {
  const res = errorResponse(405, { name: 'MethodNotAllowed', message: `use ${allow}` });
  res.headers.set('allow', allow);
  return res;
}
