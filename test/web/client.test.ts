import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { firstValueFrom, filter, take, toArray } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createRuntime,
  lmdbStore,
  memoryStore,
  nodeListener,
  scriptedModel,
  sessionEvents,
  webHandler,
  type EventStore,
} from '../../src/index.js';
import {
  connectSessionView,
  createSessionViewStore,
  sessionFrames$,
  sessionStream,
  StreamRefusedError,
  type StreamItem,
} from '../../src/web/client.js';
import { isValidationError } from '../../src/contracts/errors.js';
import { userMsg } from '../helpers/drafts.js';
import { scaled } from '../helpers/load.js';
import { tempDir } from '../helpers/tmp.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function listen(store: EventStore, port = 0): Promise<Server> {
  const server = createServer(
    nodeListener((req) => sessionEvents(store, new URL(req.url).pathname.split('/')[2]!, req, { pollMs: 30, retryMs: 50 })),
  );
  return new Promise((res) => server.listen(port, '127.0.0.1', () => res(server)));
}
const stop = (server: Server) =>
  new Promise<void>((res) => {
    server.closeAllConnections();
    server.close(() => res());
  });

async function appendMany(store: EventStore, n: number) {
  const { writerEpoch, lastSeq } = await store.attachWriter('s1');
  let next = lastSeq + 1;
  for (let i = 0; i < n; i++) next = (await store.append('s1', writerEpoch, next, [userMsg(`m${i}`, 0, 0)])).at(-1)!.seq + 1;
}

describe('actorloop/client', () => {
  it('resumes by itself after the server restarts: every record once, in order', async () => {
    const dir = tempDir();
    let store = lmdbStore({ path: dir.path });
    let server = await listen(store);
    const port = (server.address() as AddressInfo).port;
    cleanups.push(async () => {
      await stop(server);
      await store.close();
      await dir.cleanup();
    });
    await appendMany(store, 5);
    const abort = new AbortController();
    const items: StreamItem[] = [];
    const committed = () => items.flatMap((i) => (i.kind === 'committed' ? [i.logSeq] : []));
    const waitFor = async (pred: () => boolean, what: string) => {
      const until = Date.now() + scaled(10_000);
      while (!pred()) {
        if (Date.now() > until) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(items.map((i) => i.kind))}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    const reading = (async () => {
      for await (const item of sessionStream({ url: `http://127.0.0.1:${port}/sessions/s1/events`, signal: abort.signal, reconnectMs: 50 }))
        items.push(item);
    })();
    await waitFor(() => committed().length === 5, 'the first five');
    await stop(server);
    await store.close();
    store = lmdbStore({ path: dir.path }); // a new server process would open the file afresh
    await appendMany(store, 5); // appended while no server runs
    server = await listen(store, port);
    await waitFor(() => committed().length === 10, 'the rest after the restart');
    await appendMany(store, 2);
    await waitFor(() => committed().length === 12, 'live appends after the restart');
    abort.abort();
    await reading;
    expect(committed()).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    const conns = items.filter((i) => i.kind === 'connection');
    expect(conns[0]).toMatchObject({ state: 'open', attempt: 0 });
    expect(conns.some((c) => c.kind === 'connection' && c.state === 'reconnecting' && c.lastLogSeq === 5)).toBe(true);
    expect(conns.at(-1)).toMatchObject({ state: 'closed' });
  });

  it('as an Observable, and folded into an @xstate/store view', async () => {
    const store = memoryStore();
    const server = await listen(store);
    cleanups.push(() => stop(server));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sessions/s1/events`;
    await appendMany(store, 3);
    const seqs = await firstValueFrom(
      sessionFrames$({ url }).pipe(
        filter((i) => i.kind === 'committed'),
        take(3),
        toArray(),
      ),
    );
    expect(seqs.map((f) => (f.kind === 'committed' ? f.logSeq : 0))).toEqual([1, 2, 3]);
    const { store: view, stop: stopView } = connectSessionView({ sessionId: 's1', url });
    cleanups.push(async () => stopView());
    const until = Date.now() + scaled(5000);
    while (view.getSnapshot().context.lastLogSeq < 3 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    const v = view.getSnapshot().context;
    expect(v.connection).toBe('open');
    expect(v.items.map((i) => (i.kind === 'user' ? i.text : i.kind))).toEqual(['m0', 'm1', 'm2']);
    expect(v.repeats).toBe(0);
  });

  it('a refused stream (a bad cursor) throws StreamRefusedError instead of retrying', async () => {
    const server = await listen(memoryStore());
    cleanups.push(() => stop(server));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sessions/s1/events?fromSeq=zero`;
    await expect(
      (async () => {
        for await (const _ of sessionStream({ url })) void _;
      })(),
    ).rejects.toBeInstanceOf(StreamRefusedError);
  });

  it('an invalid session id (a NUL) is refused up front with a 400: the client stops with StreamRefusedError instead of reconnecting', async () => {
    const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['ok']) });
    const server = createServer(nodeListener(webHandler({ runtime, stream: { retryMs: 50 } })));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => runtime.close());
    cleanups.push(() => stop(server));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sessions/a%00b/events`;
    const raw = await fetch(url);
    expect(raw.status).toBe(400);
    expect(((await raw.json()) as { error: string }).error).toBe('ValidationError');
    const items: StreamItem[] = [];
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), scaled(5000));
    let error: unknown;
    try {
      for await (const item of sessionStream({ url, reconnectMs: 50, signal: abort.signal })) items.push(item);
    } catch (e) {
      error = e;
    }
    clearTimeout(timer);
    expect(error).toBeInstanceOf(StreamRefusedError);
    expect((error as StreamRefusedError).status).toBe(400);
    expect(items.filter((i) => i.kind === 'connection' && i.state === 'reconnecting')).toEqual([]);
  });

  it('429 (with Retry-After) and 408 are retried; 401 and 403 end the stream with StreamRefusedError', async () => {
    const store = memoryStore();
    await appendMany(store, 2);
    const answers = [429, 408];
    const seen: number[] = [];
    const server = createServer(
      nodeListener(async (req) => {
        const status = answers.shift();
        if (status !== undefined) {
          seen.push(status);
          return new Response('slow down', { status, headers: { 'retry-after': '0' } });
        }
        return sessionEvents(store, 's1', req, { pollMs: 30 });
      }),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => stop(server));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sessions/s1/events`;
    const frames = await firstValueFrom(
      sessionFrames$({ url, reconnectMs: 20 }).pipe(
        filter((i) => i.kind === 'committed'),
        take(2),
        toArray(),
      ),
    );
    expect(seen).toEqual([429, 408]);
    expect(frames.map((f) => (f.kind === 'committed' ? f.logSeq : 0))).toEqual([1, 2]);
    for (const status of [401, 403]) {
      answers.push(status);
      await expect(
        (async () => {
          for await (const _ of sessionStream({ url, reconnectMs: 20 })) void _;
        })(),
      ).rejects.toMatchObject({ name: 'StreamRefusedError', status });
    }
  });

  it('a stream that ends in stream-error is a failed attempt: the waits before reconnecting double instead of hammering the server', async () => {
    let connections = 0;
    const server = createServer(
      nodeListener(() => {
        connections++;
        const frames =
          'retry: 20\n\nevent: ready\ndata: {"kind":"ready","sessionId":"s1","fromSeq":1,"live":false}\n\nevent: stream-error\ndata: {"kind":"stream-error","name":"CorruptLogError","message":"a bad record"}\n\n';
        return new Response(frames, { headers: { 'content-type': 'text/event-stream' } });
      }),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => stop(server));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sessions/s1/events`;
    const items: StreamItem[] = [];
    const abort = new AbortController();
    const reading = (async () => {
      for await (const item of sessionStream({ url, signal: abort.signal })) items.push(item);
    })();
    await new Promise((r) => setTimeout(r, 700));
    abort.abort();
    await reading;
    // 20, 40, 80, 160, 320 ms: about six connections in 700 ms (at a steady 20 ms, over twenty)
    expect(connections).toBeGreaterThanOrEqual(3);
    expect(connections).toBeLessThanOrEqual(8);
    const reconnecting = items.filter((i) => i.kind === 'connection' && i.state === 'reconnecting');
    expect(reconnecting[0]).toMatchObject({ error: 'CorruptLogError: a bad record' });
  });
});

describe('actorloop/client options are checked before anything is fetched', () => {
  let fetches = 0;
  const counting: typeof fetch = async () => {
    fetches++;
    throw new Error('no network in this test');
  };
  /** Reads the stream's first item (a refusal rejects it), then ends the stream. */
  const firstItem = async (options: Parameters<typeof sessionStream>[0]) => {
    const it = sessionStream(options);
    try {
      return await it.next();
    } finally {
      await it.return(undefined);
    }
  };
  const CASES: [string, string[], () => unknown][] = [
    // the controller instead of its signal: fetch refused it, and a timer later threw in the host
    [
      'a signal that is the AbortController itself',
      ['signal'],
      () => firstItem({ url: 'http://127.0.0.1:1/x', signal: new AbortController() as never, fetch: counting }),
    ],
    ['headers that are a string', ['headers'], () => firstItem({ url: 'http://127.0.0.1:1/x', headers: 'abc' as never, fetch: counting })],
    [
      'a Headers instance (spread to nothing)',
      ['headers'],
      () => firstItem({ url: 'http://127.0.0.1:1/x', headers: new Headers({ a: 'b' }) as never, fetch: counting }),
    ],
    [
      'a header value with a line break',
      ['headers', 'x-token'],
      () => firstItem({ url: 'http://127.0.0.1:1/x', headers: { 'x-token': 'a\r\nb' }, fetch: counting }),
    ],
    [
      'a header name that is not an HTTP token',
      ['headers', 'bad name'],
      () => firstItem({ url: 'http://127.0.0.1:1/x', headers: { 'bad name': 'x' }, fetch: counting }),
    ],
    [
      'a header value that is not a string',
      ['headers', 'x-n'],
      () => firstItem({ url: 'http://127.0.0.1:1/x', headers: { 'x-n': 5 as never }, fetch: counting }),
    ],
    ['a relative URL with no page to resolve it against (Node)', ['url'], () => firstItem({ url: '/sessions/s1/events' })],
    ['a URL that is not http(s)', ['url'], () => firstItem({ url: 'ftp://127.0.0.1:1/x' })],
    ['a URL with credentials (fetch refuses it)', ['url'], () => firstItem({ url: 'http://u:p@127.0.0.1:1/x' })],
    [
      'a reconnectMs past what a timer takes (it would fire at once)',
      ['reconnectMs'],
      () => firstItem({ url: 'http://127.0.0.1:1/x', reconnectMs: 2 ** 31, fetch: counting }),
    ],
    [
      'sessionFrames$ given a signal (it ends by unsubscribing)',
      [],
      () => sessionFrames$({ url: 'http://127.0.0.1:1/x', signal: new AbortController().signal } as never),
    ],
    [
      'sessionFrames$ with bad headers, at the call',
      ['headers'],
      () => sessionFrames$({ url: 'http://127.0.0.1:1/x', headers: 'abc' as never }),
    ],
    ['connectSessionView with no sessionId', ['sessionId'], () => connectSessionView({ url: 'http://127.0.0.1:1/x' } as never)],
    ['connectSessionView with a bad url, at the call', ['url'], () => connectSessionView({ sessionId: 's1', url: '/x' })],
    ['createSessionViewStore with a sessionId that is not a string', ['sessionId'], () => createSessionViewStore(5 as never)],
  ];

  it.each(CASES)('%s is a ValidationError naming it, with nothing fetched', async (_what, path, call) => {
    fetches = 0;
    let error: unknown;
    try {
      await call();
    } catch (e) {
      error = e;
    }
    expect(isValidationError(error), String(error)).toBe(true);
    expect((error as { issues: { path: string[] }[] }).issues.map((i) => i.path)).toContainEqual(path);
    expect(fetches).toBe(0);
  });

  it('with its own fetch, the url goes to it as given (a relative one too), with the headers', async () => {
    const seen: { url: string; auth: string | null }[] = [];
    const fetchFn: typeof fetch = async (url, init) => {
      seen.push({ url: String(url), auth: new Headers(init?.headers).get('authorization') });
      return new Response('', { status: 404 });
    };
    const error = await firstItem({ url: '/sessions/s1/events', fetch: fetchFn, headers: { authorization: 'Bearer t' } }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StreamRefusedError);
    expect(seen).toEqual([{ url: '/sessions/s1/events', auth: 'Bearer t' }]);
  });
});
