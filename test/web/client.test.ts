import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { firstValueFrom, filter, take, toArray } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { lmdbStore, memoryStore, nodeListener, sessionEvents, type EventStore } from '../../src/index.js';
import { connectSessionView, sessionFrames$, sessionStream, StreamRefusedError, type StreamItem } from '../../src/web/client.js';
import { userMsg } from '../helpers/drafts.js';
import { scaled } from '../helpers/load.js';
import { tempDir } from '../helpers/tmp.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function listen(store: EventStore, port = 0): Promise<Server> {
  const server = createServer(nodeListener((req) => sessionEvents(store, new URL(req.url).pathname.split('/')[2]!, req, { pollMs: 30, retryMs: 50 })));
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
      for await (const item of sessionStream({ url: `http://127.0.0.1:${port}/sessions/s1/events`, signal: abort.signal, reconnectMs: 50 })) items.push(item);
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
    await expect((async () => {
      for await (const _ of sessionStream({ url })) void _;
    })()).rejects.toBeInstanceOf(StreamRefusedError);
  });
});
