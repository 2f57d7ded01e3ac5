/**
 * The web stream (`sessionEvents` over Node http, read by `actorloop/client`'s `sessionStream`):
 * - replay: a 20,000-record session on LMDB sent from seq 1, records per second end to end
 *   (server read + SSE encoding + HTTP + client parsing; server and client share this process's
 *   one thread, so each side's cost slows the other);
 * - follow: 500 appends of one record each made through the server's store object, the time
 *   from the append's promise resolving to the client receiving that record (median, p99).
 *   Appends from another process are found by the head poll instead: at most `pollMs` later.
 */
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { lmdbStore } from '../src/persistence/lmdb-store.js';
import { nodeListener } from '../src/web/node-http.js';
import { sessionEvents } from '../src/web/session-events.js';
import { sessionStream } from '../src/web/client.js';
import { fmt, median, percentile, printTable } from './table.js';

const REPLAY = 20_000;
const FOLLOW = 500;

export async function benchWebStream(): Promise<void> {
  const dir = mkdtempSync(join(process.env.ACTORLOOP_BENCH_TMP ?? '.tmp', 'web-'));
  const store = lmdbStore({ path: dir });
  const server = createServer(nodeListener((req) => sessionEvents(store, 'b1', req)));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sessions/b1/events`;
  const { writerEpoch } = await store.attachWriter('b1');
  let next = 1;
  const text = 'x'.repeat(200);
  for (let i = 0; i < REPLAY; i += 500) {
    const drafts = Array.from({ length: 500 }, (_, k) => ({
      type: 'user/message' as const,
      turn: 0,
      step: 0,
      attempt: 0,
      surfaceOp: 'append' as const,
      payload: { message: { role: 'user' as const, content: `${i + k} ${text}` } },
    }));
    next = (await store.append('b1', writerEpoch, next, drafts)).at(-1)!.seq + 1;
  }

  const abort = new AbortController();
  const t0 = performance.now();
  let replayed = 0;
  const waiting = new Map<number, (at: number) => void>();
  const reading = (async () => {
    for await (const item of sessionStream({ url, signal: abort.signal })) {
      if (item.kind !== 'committed') continue;
      if (item.logSeq === REPLAY) replayed = performance.now() - t0;
      waiting.get(item.logSeq)?.(performance.now());
    }
  })();
  while (replayed === 0) await new Promise((r) => setTimeout(r, 5));

  const latencies: number[] = [];
  for (let i = 0; i < FOLLOW; i++) {
    const seq = next;
    const got = new Promise<number>((r) => waiting.set(seq, r));
    const [rec] = await store.append('b1', writerEpoch, seq, [
      {
        type: 'user/message',
        turn: 0,
        step: 0,
        attempt: 0,
        surfaceOp: 'append',
        payload: { message: { role: 'user', content: `live ${i}` } },
      },
    ]);
    const appended = performance.now();
    latencies.push((await got) - appended);
    waiting.delete(seq);
    next = rec!.seq + 1;
  }
  abort.abort();
  await reading;
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  await store.close();

  printTable(
    ['web stream (LMDB, Node http, sessionStream client)', 'value'],
    [
      [`replay ${fmt(REPLAY)} records (~260 B payload each): records/s`, fmt(REPLAY / (replayed / 1000))],
      [`follow ${FOLLOW} appends in this process: append resolved → client, median (ms)`, fmt(median(latencies), 2)],
      ['follow: p99 (ms)', fmt(percentile(latencies, 99), 2)],
    ],
    ['left', 'right'],
  );
}
