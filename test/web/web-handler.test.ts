import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { paced } from '../../src/cli/demo-agent.js';
import {
  createRuntime,
  defineTool,
  memoryStore,
  postgresStore,
  scriptedModel,
  webHandler,
  type EventStore,
  type ModelProvider,
  type Runtime,
} from '../../src/index.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { isValidationError } from '../../src/contracts/errors.js';
import { logOf } from '../helpers/runtime.js';
import { SseReader } from './sse-reader.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const deploy = defineTool({
  name: 'deploy',
  description: 'deploys',
  parameters: z.object({ env: z.string() }),
  mode: 'exclusive',
  execute: ({ env }) => `deployed to ${env}`,
});

function make(store: EventStore = memoryStore(), model?: ModelProvider): { runtime: Runtime; handle: (r: Request) => Promise<Response> } {
  const runtime = createRuntime({
    store,
    model:
      model ??
      scriptedModel(
        [{ text: 'deploying', toolCalls: [{ id: 'c1', name: 'deploy', arguments: { env: 'staging' } }] }, 'Deployed to staging.'],
        { loop: true },
      ),
    tools: [deploy],
    approvalFor: ['deploy'],
  });
  cleanups.push(() => runtime.close());
  return { runtime, handle: webHandler({ runtime }) };
}

const post = (path: string, body: unknown, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
  new Request(`http://app${path}`, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });

describe('webHandler: inputs go to the inbox', () => {
  it('POST messages returns the durable receipt (202), the same inputId again is already_accepted (200), and no writer is attached', async () => {
    const { runtime, handle } = make();
    const res = await handle(post('/sessions/s1/messages', { inputId: 'i1', message: 'deploy it' }));
    expect(res.status).toBe(202);
    expect(await res.json()).toEqual({ sessionId: 's1', entryId: 'i1', kind: 'input', status: 'accepted' });
    const again = await handle(post('/sessions/s1/messages', { inputId: 'i1', message: 'deploy it' }));
    expect(again.status).toBe(200);
    expect(((await again.json()) as { status: string }).status).toBe('already_accepted');
    const other = await handle(post('/sessions/s1/messages', { inputId: 'i1', message: 'something else' }));
    expect(other.status).toBe(409);
    expect(((await other.json()) as { status: string }).status).toBe('refused');
    expect(await runtime.store.getHead('s1')).toBeUndefined(); // the handler never became the session's writer
  });

  it('POST messages whose inputId names a run of the session is a 400 ValidationError, nothing stored (never a 202 for an input no one can run)', async () => {
    const { runtime, handle } = make(memoryStore(), scriptedModel(['hi'], { loop: true }));
    await (await runtime.openSession('s1')).execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'first' });
    const res = await handle(post('/sessions/s1/messages', { inputId: 'r1', message: 'again' }));
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: 'ValidationError', message: expect.stringMatching(/run r1 already exists/) });
    expect(await runtime.store.work!.getEntry('s1', 'r1')).toBeUndefined();
  });

  it('a worker runs the posted message; the approval is answered through POST respond; the stream shows it all', async () => {
    const { runtime, handle } = make();
    const worker = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
    const stream = new SseReader(await handle(new Request('http://app/sessions/s1/events')));
    cleanups.push(() => stream.cancel());
    expect((await handle(post('/sessions/s1/messages', { inputId: 'i1', message: { role: 'user', content: 'deploy it' } }))).status).toBe(
      202,
    );
    const suspended = await runtime.waitForResult('s1', 'i1', { signal: AbortSignal.timeout(20_000) });
    expect(suspended.outcome).toBe('suspended');
    const q = suspended.pendingRequest!;
    const answer = { entryId: 'a1', runId: 'i1', questionId: q.questionId, answer: { decisions: { c1: 'approve' } } };
    const r = await handle(post('/sessions/s1/respond', answer));
    expect(r.status).toBe(202);
    expect(((await r.json()) as { kind: string }).kind).toBe('respond');
    await stream.until(
      (x) => x.committed().some((f) => f.record.type === 'run/end' && f.record.payload.status === 'succeeded'),
      20_000,
      'the run to succeed',
    );
    const types = stream.committed().map((f) => f.record.type);
    expect(types).toContain('approval/requested');
    expect(types).toContain('approval/decided');
    expect(stream.committed().find((f) => f.record.type === 'final/message')!.record.payload.content).toBe('Deployed to staging.');
    expect(stream.committed().map((f) => f.logSeq)).toEqual((await logOf(runtime.store, 's1')).map((e) => e.seq));
  });

  it('steer, stop and cancel become their inbox entries; cancel with an inputId cancels that input', async () => {
    const { runtime, handle } = make();
    const kinds: string[] = [];
    for (const [path, body] of [
      ['steer', { inputId: 'st1', message: 'also check prod' }],
      ['stop', { entryId: 'stop1', reason: 'enough' }],
      ['cancel', { entryId: 'c1' }],
      ['cancel', { entryId: 'c2', inputId: 'st1' }],
    ] as const) {
      const res = await handle(post(`/sessions/s2/${path}`, body));
      expect(res.status).toBe(202);
      kinds.push(((await res.json()) as { kind: string }).kind);
    }
    expect(kinds).toEqual(['input', 'stop_after_round', 'cancel', 'cancel_input']);
    const pending = await runtime.store.work!.pending('s2');
    expect(pending.map((p) => p.entry)).toEqual([
      { kind: 'input', inputId: 'st1', mode: 'steer', message: 'also check prod' },
      { kind: 'stop_after_round', entryId: 'stop1', reason: 'enough' },
      { kind: 'cancel', entryId: 'c1' },
      { kind: 'cancel_input', entryId: 'c2', inputId: 'st1' },
    ]);
  });
});

describe('webHandler: bad requests are clear 4xx errors and submit nothing', () => {
  it.each([
    ['not JSON', post('/sessions/s1/messages', '{"inputId": ', { 'content-type': 'application/json' }), 400, 'ValidationError'],
    ['no content type', post('/sessions/s1/messages', '{}', { 'content-type': 'text/plain' }), 415, 'UnsupportedMediaType'],
    [
      'a content type that only starts as JSON',
      post('/sessions/s1/messages', { inputId: 'i', message: 'hi' }, { 'content-type': 'application/json-seq' }),
      415,
      'UnsupportedMediaType',
    ],
    ['a session list limit in hex', new Request('http://app/sessions?limit=0x10'), 400, 'ValidationError'],
    ['a session list limit with an exponent', new Request('http://app/sessions?limit=1e2'), 400, 'ValidationError'],
    ['a missing inputId', post('/sessions/s1/messages', { message: 'hi' }), 400, 'ValidationError'],
    ['an unknown field', post('/sessions/s1/messages', { inputId: 'i', message: 'hi', role: 'system' }), 400, 'ValidationError'],
    [
      'an assistant message',
      post('/sessions/s1/messages', { inputId: 'i', message: { role: 'assistant', content: 'I agree' } }),
      400,
      'ValidationError',
    ],
    ['an id with a slash', post('/sessions/s1/stop', { entryId: 'a/b' }), 400, 'ValidationError'],
    ['respond without questionId', post('/sessions/s1/respond', { entryId: 'e', answer: {} }), 400, 'ValidationError'],
    ['an unknown action', post('/sessions/s1/launch', {}), 404, 'NotFound'],
    ['a path outside', new Request('http://app/other'), 404, 'NotFound'],
    ['GET on an input', new Request('http://app/sessions/s1/messages'), 405, 'MethodNotAllowed'],
    ['POST on the stream', post('/sessions/s1/events', {}), 405, 'MethodNotAllowed'],
    ['a malformed session id', new Request('http://app/sessions/%E0%A4%A/events'), 400, 'ValidationError'],
    ['a NUL in the session id of the stream', new Request('http://app/sessions/a%00b/events'), 400, 'ValidationError'],
    ['a NUL in the session id of an input', post('/sessions/a%00b/messages', { inputId: 'i', message: 'hi' }), 400, 'ValidationError'],
    ['a bad cursor', new Request('http://app/sessions/s1/events?fromSeq=x'), 400, 'ValidationError'],
    ['a body too large', post('/sessions/s1/messages', { inputId: 'i', message: 'x'.repeat(2 * 1024 * 1024) }), 413, 'PayloadTooLarge'],
  ])('%s → %i', async (_what, request, status, error) => {
    const { runtime, handle } = make();
    const res = await handle(request);
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe(error);
    expect(body.message.length).toBeGreaterThan(5);
    expect(await runtime.store.work!.pending('s1')).toEqual([]);
  });

  it('a chunked body past maxBodyBytes is a 413 as soon as the limit is passed: the rest is never read', async () => {
    const { runtime } = make();
    const handle = webHandler({ runtime, maxBodyBytes: 64 * 1024 });
    const chunk = new Uint8Array(16 * 1024).fill(0x61);
    let pulled = 0;
    let cancelled = false;
    // an 8 MiB body with no Content-Length, produced only as the handler pulls it
    const body = new ReadableStream<Uint8Array>(
      {
        pull(c) {
          if (pulled >= 8 * 1024 * 1024) return c.close();
          pulled += chunk.byteLength;
          c.enqueue(chunk);
        },
        cancel() {
          cancelled = true;
        },
      },
      { highWaterMark: 0 },
    );
    const res = await handle(
      new Request('http://app/sessions/s1/messages', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        duplex: 'half',
      } as RequestInit),
    );
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: string }).error).toBe('PayloadTooLarge');
    expect(pulled).toBeLessThanOrEqual(64 * 1024 + chunk.byteLength);
    await new Promise((r) => setTimeout(r, 10));
    expect(cancelled).toBe(true);
    expect(await runtime.store.work!.pending('s1')).toEqual([]);
  });

  it('a closed runtime is a 503 on every route, the event stream included (never a 200 that ends at once)', async () => {
    const { runtime, handle } = make();
    await runtime.close();
    const routes: Request[] = [
      new Request('http://app/sessions/s1/events'),
      new Request('http://app/sessions/s1/messages', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ inputId: 'i1', message: 'hi' }),
      }),
      new Request('http://app/sessions'),
      new Request('http://app/chat/s1/messages'),
      new Request('http://app/chat/s1/stream'),
    ];
    for (const r of routes) {
      const res = await handle(r);
      expect(`${r.method} ${new URL(r.url).pathname} ${res.status}`).toBe(`${r.method} ${new URL(r.url).pathname} 503`);
      // (the store's own message names it — a file path, a database: not the client's to read)
      expect(await res.json()).toEqual({ error: 'StoreClosedError', message: 'the runtime is closed: it serves nothing more' });
    }
  });

  it('options are checked: a missing runtime or a bad basePath is a ValidationError', () => {
    expect(() => webHandler({} as never)).toThrow(expect.objectContaining({ name: 'ValidationError' }));
    let error: unknown;
    try {
      webHandler({ runtime: make().runtime, basePath: 'api/' });
    } catch (e) {
      error = e;
    }
    expect(isValidationError(error) && error.issues[0]!.path).toEqual(['basePath']);
  });

  it('routes under a basePath', async () => {
    const { runtime } = make();
    const handle = webHandler({ runtime, basePath: '/api' });
    expect((await handle(post('/api/sessions/s1/messages', { inputId: 'i1', message: 'hi' }))).status).toBe(202);
    expect((await handle(post('/sessions/s1/messages', { inputId: 'i2', message: 'hi' }))).status).toBe(404);
  });
});

describe('webHandler: live deltas only where the session runs', async () => {
  const db = await postgresForTests('webHandler on PostgreSQL');
  it.runIf(db)(
    'PostgreSQL: a stream served by a runtime that does not run the session carries the committed events only; the serving one adds deltas',
    async () => {
      const schema = freshSchema('webh');
      const storeA = postgresStore({ connectionString: db!.url, schema });
      const storeB = postgresStore({ connectionString: db!.url, schema });
      const a = make(storeA, paced(scriptedModel(['A fairly long answer, streamed word by word.'], { loop: true }), 0.2));
      const b = make(storeB);
      const worker = a.runtime.serve({ concurrency: 1, leaseMs: 5000, pollMs: 20 });
      cleanups.push(() => worker.stop({ graceMs: 100 }));
      const here = new SseReader(await a.handle(new Request('http://app/sessions/s9/events')));
      const elsewhere = new SseReader(await b.handle(new Request('http://app/sessions/s9/events')));
      cleanups.push(
        () => here.cancel(),
        () => elsewhere.cancel(),
      );
      expect((await b.handle(post('/sessions/s9/messages', { inputId: 'i1', message: 'hi' }))).status).toBe(202); // submitted through B, run by A
      const ended = (x: SseReader) => x.committed().some((f) => f.record.type === 'run/end');
      await here.until(ended, 20_000, 'the run on the serving runtime');
      await elsewhere.until(ended, 20_000, 'the run on the other runtime');
      const lives = (x: SseReader) => x.messages.filter((m) => m.frame.kind === 'live').length;
      expect(lives(here)).toBeGreaterThan(3);
      expect(lives(elsewhere)).toBe(0);
      expect(elsewhere.committed().map((f) => f.logSeq)).toEqual(here.committed().map((f) => f.logSeq));
    },
  );
});

describe('webHandler: authorize decides per session and action', () => {
  const withAuth = (authorize: (r: Request, c: { sessionId: string; action: string; route: string }) => unknown) => {
    const { runtime } = make();
    return { runtime, handle: webHandler({ runtime, authorize: authorize as never }) };
  };

  it('is told the session and the action of every route: read, submit (messages, steer), control (stop, cancel), respond', async () => {
    const calls: { sessionId: string; action: string; route: string }[] = [];
    const { handle } = withAuth((_r, c) => (calls.push(c), true));
    const stream = await handle(new Request('http://app/sessions/s%2F1/events'));
    expect(stream.status).toBe(200);
    await stream.body!.cancel();
    for (const [route, body] of [
      ['messages', { inputId: 'i1', message: 'hi' }],
      ['steer', { inputId: 'i2', message: 'hi' }],
      ['stop', { entryId: 'e1' }],
      ['cancel', { entryId: 'e2' }],
      ['respond', { entryId: 'e3', questionId: 'q', answer: 1 }],
    ] as const) {
      expect((await handle(post(`/sessions/s%2F1/${route}`, body))).status).toBe(202);
    }
    expect(calls).toEqual([
      { sessionId: 's/1', action: 'read', route: 'events' },
      { sessionId: 's/1', action: 'submit', route: 'messages' },
      { sessionId: 's/1', action: 'submit', route: 'steer' },
      { sessionId: 's/1', action: 'control', route: 'stop' },
      { sessionId: 's/1', action: 'control', route: 'cancel' },
      { sessionId: 's/1', action: 'respond', route: 'respond' },
    ]);
  });

  it('a bearer token per session: true allows, false is a 403, a Response is sent as it is', async () => {
    const tokens = new Map([['s1', 'secret-1']]);
    const { runtime, handle } = withAuth((request, { sessionId }) => {
      const header = request.headers.get('authorization');
      if (header === null) return new Response('log in first', { status: 401, headers: { 'www-authenticate': 'Bearer' } });
      return header === `Bearer ${tokens.get(sessionId)}`;
    });
    const body = { inputId: 'i1', message: 'hi' };
    const none = await handle(post('/sessions/s1/messages', body));
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    expect(await none.text()).toBe('log in first');
    const wrong = await handle(post('/sessions/s1/messages', body, { 'content-type': 'application/json', authorization: 'Bearer guess' }));
    expect(wrong.status).toBe(403);
    expect(((await wrong.json()) as { error: string }).error).toBe('Forbidden');
    const other = await handle(new Request('http://app/sessions/s2/events', { headers: { authorization: 'Bearer secret-1' } }));
    expect(other.status).toBe(403); // s1's token does not open s2
    expect(await runtime.store.work!.pending('s1')).toEqual([]);
    const right = await handle(
      post('/sessions/s1/messages', body, { 'content-type': 'application/json', authorization: 'Bearer secret-1' }),
    );
    expect(right.status).toBe(202);
  });

  it.each([
    ['undefined', () => undefined],
    ['a truthy value that is not true', () => 'yes'],
    [
      'a throw',
      () => {
        throw new Error('the auth service is down');
      },
    ],
    ['a rejection', async () => Promise.reject(new Error('the auth service is down'))],
  ])('%s denies (403), and the error is not shown to the client', async (_what, authorize) => {
    const { runtime, handle } = withAuth(authorize);
    const res = await handle(post('/sessions/s1/messages', { inputId: 'i1', message: 'hi' }));
    expect(res.status).toBe(403);
    expect(await res.text()).not.toContain('auth service');
    expect(await runtime.store.work!.pending('s1')).toEqual([]);
  });

  it('runs before the body is read: a denied POST reads none of it', async () => {
    const { handle } = withAuth(() => false);
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>(
      { pull: (c) => (pulled++, c.enqueue(new TextEncoder().encode('{}'))) },
      { highWaterMark: 0 },
    );
    const res = await handle(
      new Request('http://app/sessions/s1/messages', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        duplex: 'half',
      } as RequestInit),
    );
    expect(res.status).toBe(403);
    expect(pulled).toBe(0);
  });
});

describe('webHandler: allowedHosts', () => {
  it('a Host not listed is a 403 before anything else; listed ones (with their port, or a name on any port) are served', async () => {
    const { runtime } = make();
    const handle = webHandler({ runtime, allowedHosts: ['localhost:8787', '[::1]:8787', 'chat.internal'] });
    let n = 0;
    const at = (host: string) =>
      new Request('http://app/sessions/s1/messages', {
        method: 'POST',
        headers: { host, 'content-type': 'application/json' },
        body: JSON.stringify({ inputId: `i${++n}`, message: 'hi' }),
      });
    for (const host of ['attacker.example', 'attacker.example:8787', 'localhost:9999', 'localhost']) {
      const res = await handle(at(host));
      expect(res.status, host).toBe(403);
      expect(((await res.json()) as { error: string }).error).toBe('HostNotAllowed');
    }
    expect(await runtime.store.work!.pending('s1')).toEqual([]);
    for (const host of ['localhost:8787', 'LOCALHOST:8787', '[::1]:8787', 'chat.internal', 'chat.internal:443'])
      expect((await handle(at(host))).status, host).toBe(202);
    expect(() => webHandler({ runtime, allowedHosts: ['http://x/'] })).toThrow(expect.objectContaining({ name: 'ValidationError' }));
  });
});
