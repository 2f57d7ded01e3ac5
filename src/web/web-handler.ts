import { z } from 'zod';
import { isStoreClosedError, isValidationError, ValidationError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import { assertSessionId } from '../persistence/store-input.js';
import { hasLoneSurrogate } from '../contracts/ids.js';
import type { Runtime } from '../runtime/runtime.js';
import { CancelBody, MessageBody, RespondBody, StopBody, type InboxEntry, type InboxReceipt } from './inbox-contract.js';
import { errorResponse, sessionEvents, SessionEventsOptions } from './session-events.js';
import { ChatRequestBody, chatHistory, chatPost, type ChatSubmission, chatSubmission, sessionList } from './chat-routes.js';
import { uiMessageStream } from './ui-message-stream.js';
import { hostAllowed, HostPattern } from './hosts.js';

/**
 * What a request asks to do with a session, as `authorize` is told:
 * - `read`: `GET /sessions/:id/events`, the session's event stream (every committed record, whole);
 *   `GET /chat/:id/stream | messages`; `GET /sessions` (asked per listed session);
 * - `submit`: `POST messages | steer`, a user message (a prompt, a follow-up, a steer, which on an
 *   idle session starts a run); `POST /chat` with a user message;
 * - `control`: `POST stop | cancel`, stops the run under way;
 * - `respond`: `POST respond`, answers an approval or a question; `POST /chat` with approval responses.
 * @example
 * webHandler({ runtime, authorize: (req, { action }) => action === 'read' })
 */
export type WebAction = 'read' | 'submit' | 'control' | 'respond';
/**
 * A route of `webHandler`: the last segment of `/sessions/:id/<route>`, or one of the AI SDK
 * routes (`chat`: `POST /chat`; `stream`: `GET /chat/:id/stream`; `history`: `GET /chat/:id/messages`)
 * or the session list (`sessions`: `GET /sessions`, asked once per listed session).
 */
export type WebRoute = 'events' | 'messages' | 'steer' | 'respond' | 'stop' | 'cancel' | 'chat' | 'stream' | 'history' | 'sessions';
export interface AuthorizeContext {
  sessionId: string;
  action: WebAction;
  route: WebRoute;
}
/**
 * Decides whether `request` may do `action` on `sessionId`: `true` allows it, `false` is a 403,
 * a `Response` is sent as it is (e.g. a 401 with `WWW-Authenticate`). Anything else — `undefined`,
 * a truthy non-`true` value, a throw or a rejection — denies (403).
 * Contract: called once per request, after the route, method and session id are known to be
 * valid and before the body is read or anything is submitted — except `POST /chat`, whose session
 * id is in the body: it is called once the body is read (within `maxBodyBytes`) and checked, before
 * anything is submitted; and `GET /sessions`, where it is called for each session listed (a
 * `false` leaves the session out). May be async; must not consume the request's body.
 * @example
 * const authorize: Authorize = (req, { action }) => action === 'read' || req.headers.get('x-role') === 'operator'
 */
export type Authorize = (request: Request, context: AuthorizeContext) => boolean | Response | Promise<boolean | Response>;

export const WebHandlerOptions = z.strictObject({
  runtime: z.custom<Runtime>(
    (v) => typeof v === 'object' && v !== null && typeof (v as Runtime).liveEnvelopes$ === 'function',
    'a runtime (createRuntime)',
  ),
  /** Where the routes are mounted, e.g. `/api` (default: the root). */
  basePath: z
    .string()
    .regex(/^(\/[^/]+)*$/, 'empty or /segment(/segment)*')
    .default(''),
  /** Largest request body accepted, in bytes. */
  maxBodyBytes: z
    .number()
    .int()
    .positive()
    .max(64 * 1024 * 1024)
    .default(1024 * 1024),
  /** Options of every event stream (capacity, heartbeat, polling). */
  stream: SessionEventsOptions.omit({ live: true, childEnvelopes: true }).partial().optional(),
  /** Who may do what on which session (see `Authorize`); without it every request is allowed. */
  authorize: z
    .custom<Authorize>((v) => typeof v === 'function', 'a function (request, { sessionId, action, route }) => true | false | Response')
    .optional(),
  /**
   * The Host header values served (`localhost:8787`, `[::1]:8787`; a name without a port: any
   * port); any other Host is a 403 before anything else (DNS rebinding). Without it: any Host.
   */
  allowedHosts: z.array(HostPattern).min(1).optional(),
});
export type WebHandlerOptions = z.input<typeof WebHandlerOptions>;
type Resolved = z.output<typeof WebHandlerOptions>;

type Route = { action: WebAction; body: z.ZodType; entry: (body: never) => InboxEntry };
const ROUTES = new Map<string, Route>([
  [
    'messages',
    {
      action: 'submit',
      body: MessageBody,
      entry: (b: z.infer<typeof MessageBody>) => ({ kind: 'input', inputId: b.inputId, mode: 'follow_up', message: b.message }),
    },
  ],
  [
    'steer',
    {
      // a user message, like a prompt: on an idle session it starts a run of its own
      action: 'submit',
      body: MessageBody,
      entry: (b: z.infer<typeof MessageBody>) => ({ kind: 'input', inputId: b.inputId, mode: 'steer', message: b.message }),
    },
  ],
  ['respond', { action: 'respond', body: RespondBody, entry: (b: z.infer<typeof RespondBody>) => ({ kind: 'respond', ...b }) }],
  ['stop', { action: 'control', body: StopBody, entry: (b: z.infer<typeof StopBody>) => ({ kind: 'stop_after_round', ...b }) }],
  [
    'cancel',
    {
      action: 'control',
      body: CancelBody,
      entry: (b: z.infer<typeof CancelBody>) =>
        b.inputId !== undefined
          ? { kind: 'cancel_input', entryId: b.entryId, inputId: b.inputId }
          : { kind: 'cancel', entryId: b.entryId, ...(b.reason !== undefined ? { reason: b.reason } : {}) },
    },
  ],
]);

const STATUS: Record<InboxReceipt['status'], number> = { accepted: 202, already_accepted: 200, refused: 409 };

/**
 * The session endpoints on web-standard Request/Response — and the AI SDK's (`POST /chat`,
 * `GET /chat/:id/stream`, `GET /chat/:id/messages`: `useChat` with its default transport, see
 * chat-routes.ts) and the session list (`GET /sessions`): `GET /sessions/:id/events` (the event
 * stream, `sessionEvents` with the session's live deltas when it runs in this process) and
 * `POST /sessions/:id/messages | steer | respond | stop | cancel`, each a JSON body checked with
 * zod and submitted to the inbox (`runtime.submit`), answered with the durable receipt
 * (202 accepted, 200 already accepted — the same id again —, 409 refused). Bad input is a 4xx
 * with `{ error, message, issues? }`; nothing is submitted. `authorize` decides per session and
 * action (docs/web.md); `allowedHosts` refuses other Host headers.
 * @example
 * const handle = webHandler({
 *   runtime,
 *   authorize: (req, { sessionId }) => req.headers.get('authorization') === `Bearer ${tokenOf(sessionId)}`,
 * })
 * // Node: http.createServer(nodeListener(handle)); Hono: app.all('/sessions/*', (c) => handle(c.req.raw))
 */
export function webHandler(options: WebHandlerOptions): (request: Request) => Promise<Response> {
  const o = parseInput(WebHandlerOptions, options, 'webHandler');
  const runtime = o.runtime;
  const chatStream = SessionEventsOptions.parse(o.stream ?? {}); // the UI message streams' options, resolved once
  return async (request: Request) => {
    try {
      if (o.allowedHosts && !hostAllowed(request, o.allowedHosts)) return hostRefused(request);
      const path = new URL(request.url).pathname;
      const chat = await chatRoutes(o, chatStream, runtime, request, path);
      if (chat) return chat;
      if (!path.startsWith(`${o.basePath}/sessions/`)) return notFound(path);
      const parts = path.slice(o.basePath.length + '/sessions/'.length).split('/');
      if (parts.length !== 2) return notFound(path);
      const name = parts[1]!;
      const route = ROUTES.get(name);
      if (name !== 'events' && !route) return notFound(path);
      let sessionId: string;
      try {
        sessionId = decodeURIComponent(parts[0]!);
      } catch {
        return errorResponse(400, new ValidationError('session id', [{ path: ['sessionId'], message: 'not a valid percent-encoded id' }]));
      }
      try {
        assertSessionId(sessionId, 'session id');
      } catch (e) {
        return errorResponse(400, e);
      }
      if (request.method !== (route ? 'POST' : 'GET')) return methodNotAllowed(route ? 'POST' : 'GET');
      if (o.authorize) {
        const denied = await authorized(o.authorize, request, { sessionId, action: route?.action ?? 'read', route: name as WebRoute });
        if (denied) return denied;
      }
      if (!route) {
        // a closed runtime is a 503 (below), not a stream that ends at once; another failure of the
        // store is the stream's to report (its stream-error frame)
        await runtime.store.getHead(sessionId).catch((e: unknown) => {
          if (isStoreClosedError(e)) throw e;
        });
        return sessionEvents(runtime.store, sessionId, request, {
          ...o.stream,
          live: runtime.liveEnvelopes$(sessionId),
          childEnvelopes: (id) => runtime.liveEnvelopes$(id),
        });
      }
      const body = await jsonBody(request, o.maxBodyBytes);
      if (body instanceof Response) return body;
      let entry: InboxEntry;
      try {
        entry = route.entry(parseInput(route.body, body, `POST ${name}`) as never);
      } catch (e) {
        return errorResponse(400, e);
      }
      const receipt = await runtime.submit(sessionId, entry);
      return json(STATUS[receipt.status], receipt);
    } catch (e) {
      if (isValidationError(e)) return errorResponse(400, e);
      // (its message names the store — a file path, a database — which is not the client's to read)
      if (isStoreClosedError(e)) return errorResponse(503, { name: e.name, message: 'the runtime is closed: it serves nothing more' });
      return errorResponse(500, { name: (e as Error).name ?? 'Error', message: (e as Error).message ?? String(e) });
    }
  };
}

/**
 * The AI SDK routes (`useChat`'s default transport with `api: basePath + '/chat'`) and the session
 * list; undefined for any other path.
 */
async function chatRoutes(
  o: Resolved,
  stream: z.output<typeof SessionEventsOptions>,
  runtime: Runtime,
  request: Request,
  path: string,
): Promise<Response | undefined> {
  const check = (sessionId: string, action: WebAction, route: WebRoute) =>
    o.authorize ? authorized(o.authorize, request, { sessionId, action, route }) : Promise.resolve(undefined);
  if (path === `${o.basePath}/sessions`) {
    if (request.method !== 'GET') return methodNotAllowed('GET');
    const authorize = o.authorize;
    return sessionList(runtime.store, request, (sessionId) =>
      authorize ? verdictOf(authorize, request, { sessionId, action: 'read', route: 'sessions' }) : Promise.resolve(true),
    );
  }
  if (path === `${o.basePath}/chat`) {
    if (request.method !== 'POST') return methodNotAllowed('POST');
    const raw = await jsonBody(request, o.maxBodyBytes);
    if (raw instanceof Response) return raw;
    let body: ChatRequestBody;
    let submission: ChatSubmission;
    try {
      body = parseInput(ChatRequestBody, raw, 'POST chat');
      if (typeof body.id === 'string') assertInPaths(body.id); // its own message first: a lone surrogate is the store's rule too
      assertSessionId(body.id, 'chat id');
      submission = chatSubmission(body);
    } catch (e) {
      return errorResponse(400, e);
    }
    const denied = await check(body.id, submission.kind === 'prompt' ? 'submit' : 'respond', 'chat');
    if (denied) return denied;
    const live = runtime.liveEnvelopes$(body.id);
    return chatPost(runtime.store, (id, entry) => runtime.submit(id, entry), body.id, request, submission, { ...stream, live });
  }
  if (!path.startsWith(`${o.basePath}/chat/`)) return undefined;
  const parts = path.slice(o.basePath.length + '/chat/'.length).split('/');
  const route = parts.length === 2 ? CHAT_ROUTES.get(parts[1]!) : undefined;
  if (route === undefined) return notFound(path);
  let sessionId: string;
  try {
    sessionId = decodeURIComponent(parts[0]!);
    assertSessionId(sessionId, 'chat id');
  } catch (e) {
    return errorResponse(
      400,
      isValidationError(e) ? e : new ValidationError('chat id', [{ path: ['id'], message: 'not a valid percent-encoded id' }]),
    );
  }
  if (request.method !== 'GET') return methodNotAllowed('GET');
  const denied = await check(sessionId, 'read', route);
  if (denied) return denied;
  if (route === 'history') return chatHistory(runtime.store, sessionId);
  return uiMessageStream(runtime.store, sessionId, request, { ...stream, live: runtime.liveEnvelopes$(sessionId) });
}

const CHAT_ROUTES = new Map<string, WebRoute>([
  ['stream', 'stream'],
  ['messages', 'history'],
]);

/** `true`, the app's own `Response`, or `false` for anything else (a throw denies too). */
async function verdictOf(authorize: Authorize, request: Request, context: AuthorizeContext): Promise<boolean | Response> {
  let verdict: unknown;
  try {
    verdict = await authorize(request, context);
  } catch {
    verdict = undefined; // a failing check denies; its error is the app's, not the client's to read
  }
  return verdict === true || verdict instanceof Response ? verdict : false;
}

/** undefined when `authorize` returned `true`; else the response to send (its own, or a 403). */
async function authorized(authorize: Authorize, request: Request, context: AuthorizeContext): Promise<Response | undefined> {
  const verdict = await verdictOf(authorize, request, context);
  if (verdict === true) return undefined;
  if (verdict instanceof Response) return verdict;
  const session = JSON.stringify(context.sessionId.slice(0, 200));
  return errorResponse(403, { name: 'Forbidden', message: `not allowed to ${context.action} session ${session}` });
}

/**
 * A chat id the chat's own paths can name (its stream, its history): not `.` or `..` (a URL's path
 * drops those segments) and well-formed Unicode (a lone surrogate has no percent-encoding).
 */
function assertInPaths(id: string): void {
  const message =
    id === '.' || id === '..'
      ? 'not . or .. (a URL path cannot name it)'
      : hasLoneSurrogate(id)
        ? 'a lone surrogate (not Unicode text: a URL path cannot name it)'
        : undefined;
  if (message) throw new ValidationError('POST chat', [{ path: ['id'], message }]);
}

async function jsonBody(request: Request, max: number): Promise<unknown> {
  const type = request.headers.get('content-type') ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type))
    return errorResponse(415, {
      name: 'UnsupportedMediaType',
      message: `send the body as application/json (got ${JSON.stringify(type.slice(0, 80))})`,
    });
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

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
  });
const notFound = (path: string) =>
  errorResponse(404, {
    name: 'NotFound',
    message:
      `no route ${path.slice(0, 200)}: the routes are /sessions/:id/{events,messages,steer,respond,stop,cancel}, ` +
      '/sessions, /chat and /chat/:id/{stream,messages}',
  });
function hostRefused(request: Request): Response {
  const host = JSON.stringify((request.headers.get('host') ?? new URL(request.url).host).slice(0, 200));
  return errorResponse(403, { name: 'HostNotAllowed', message: `the Host ${host} is not served here (allowedHosts)` });
}
const tooLarge = (max: number) => errorResponse(413, { name: 'PayloadTooLarge', message: `the body is larger than ${max} bytes` });
function methodNotAllowed(allow: string): Response {
  const res = errorResponse(405, { name: 'MethodNotAllowed', message: `use ${allow}` });
  res.headers.set('allow', allow);
  return res;
}
