import { join } from 'node:path';
import { Subject } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { paced } from '../../src/cli/demo-agent.js';
import { createRuntime, lmdbStore, memoryStore, postgresStore, scriptedModel, type EventStore } from '../../src/index.js';
import type { Envelope } from '../../src/streams/envelopes.js';
import { sessionEvents } from '../../src/web/session-events.js';
import { REPO_ROOT, killAllChildren, spawnTs, type ChildRun } from '../crash/child-util.js';
import { userMsg } from '../helpers/drafts.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';
import { SseReader } from './sse-reader.js';

const APPEND_CHILD = join(REPO_ROOT, 'test/web/append-child.ts');
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await killAllChildren();
  for (const c of cleanups.splice(0).reverse()) await c();
});

const req = (query = '', headers: Record<string, string> = {}) => new Request(`http://test/sessions/s1/events${query}`, { headers });

function open(store: EventStore, request: Request, options: Parameters<typeof sessionEvents>[3] = {}): SseReader {
  const res = sessionEvents(store, 's1', request, options);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const r = new SseReader(res);
  cleanups.push(() => r.cancel());
  return r;
}

async function appendN(store: EventStore, n: number, sessionId = 's1'): Promise<void> {
  const { writerEpoch, lastSeq } = await store.attachWriter(sessionId);
  await store.append(
    sessionId,
    writerEpoch,
    lastSeq + 1,
    Array.from({ length: n }, (_, i) => userMsg(`m${i}`, 0, 0)),
  );
}

const seqs = (r: SseReader) => r.committed().map((f) => f.logSeq);
const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

describe('sessionEvents: the cursor', () => {
  it('replays the log from the start, one committed event per record with id = its seq, then follows appends', async () => {
    const store = memoryStore();
    await appendN(store, 3);
    const r = open(store, req());
    await r.until((x) => seqs(x).length === 3, 5000, 'the replay');
    await appendN(store, 2); // seq 4..5 (attach is not a record on a bare store)
    await r.until((x) => seqs(x).length === 5, 5000, 'the live appends');
    expect(seqs(r)).toEqual(range(1, 5));
    const ids = r.messages.filter((m) => m.event === 'committed').map((m) => m.id);
    expect(ids).toEqual(['1', '2', '3', '4', '5']);
    expect(r.messages[0]!.frame).toEqual({ kind: 'ready', sessionId: 's1', fromSeq: 1, live: false });
    expect(r.parser.retryMs).toBe(1000);
  });

  it('Last-Event-ID: N resumes at N + 1 and wins over fromSeq; fromSeq=N starts at N', async () => {
    const store = memoryStore();
    await appendN(store, 6);
    const a = open(store, req('?fromSeq=2', { 'Last-Event-ID': '4' }));
    await a.until((x) => seqs(x).length === 2, 5000, 'seqs 5..6');
    expect(seqs(a)).toEqual([5, 6]);
    const b = open(store, req('?fromSeq=3'));
    await b.until((x) => seqs(x).length === 4, 5000, 'seqs 3..6');
    expect(seqs(b)).toEqual([3, 4, 5, 6]);
    const c = open(store, req('', { 'Last-Event-ID': '0' }));
    await c.until((x) => seqs(x).length === 6, 5000, 'seqs 1..6');
    expect(seqs(c)).toEqual(range(1, 6));
  });

  it('a reconnect with the last id received misses nothing and repeats nothing, while appends go on', async () => {
    const store = memoryStore();
    const { writerEpoch } = await store.attachWriter('s1');
    let next = 1;
    const writing = (async () => {
      for (let i = 0; i < 40; i++) {
        const w = await store.append('s1', writerEpoch, next, [userMsg(`m${i}`, 0, 0), userMsg(`n${i}`, 0, 0)]);
        next = w.at(-1)!.seq + 1;
        await new Promise((res) => setTimeout(res, 2));
      }
    })();
    const received: number[] = [];
    let last = 0;
    for (let cut = 0; cut < 4; cut++) {
      const r = open(store, req('', { 'Last-Event-ID': String(last) }));
      await r.until((x) => seqs(x).length >= 7, 10_000, `seven records on connection ${cut}`);
      await r.cancel();
      received.push(...seqs(r));
      last = received.at(-1)!;
    }
    await writing;
    const r = open(store, req('', { 'Last-Event-ID': String(last) }));
    await r.until((x) => x.committed().at(-1)?.logSeq === 80, 10_000, 'the tail');
    received.push(...seqs(r));
    expect(received).toEqual(range(1, 80));
  });

  it('a malformed cursor is a 400 naming it, as JSON', async () => {
    const store = memoryStore();
    for (const [request, field] of [
      [req('', { 'Last-Event-ID': 'abc' }), 'Last-Event-ID'],
      [req('?fromSeq=0'), 'fromSeq'],
      [req('?fromSeq=-3'), 'fromSeq'],
      [req('?fromSeq=1e3'), 'fromSeq'],
    ] as const) {
      const res = sessionEvents(store, 's1', request);
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: string; issues: { path: string[] }[] };
      expect(body.error).toBe('ValidationError');
      expect(body.issues[0]!.path).toEqual([field]);
    }
    expect(sessionEvents(store, '', req()).status).toBe(400);
  });

  it("the app's own bad options throw a ValidationError from the call; they are not a client's 400", () => {
    const store = memoryStore();
    for (const bad of [{ capacity: 0 }, { bogus: 1 }, { heartbeatMs: 'x' }])
      expect(() => sessionEvents(store, 's1', req(), bad as never)).toThrow(expect.objectContaining({ name: 'ValidationError' }));
  });
});

describe('sessionEvents: appends made by another process', () => {
  async function followChild(kind: 'lmdb' | 'pg', where: string, store: EventStore, extra: string[] = []) {
    await appendN(store, 2); // seq 1..2 written here, before the child takes over
    const r = open(store, req('?fromSeq=2'), { pollMs: 50 });
    await r.until((x) => seqs(x).length === 1, 5000, 'the replay');
    const child: ChildRun = spawnTs(APPEND_CHILD, [kind, where, 's1', '12', '--pause-ms=15', ...extra], { label: `append-child ${kind}` });
    await child.waitFor((l) => l === 'DONE', 30_000, 'DONE');
    const last = Math.max(...child.lines.filter((l) => l.startsWith('ACK ')).map((l) => Number(l.split(' ')[2])));
    expect(last).toBe(2 + 18); // 12 batches of 1 or 2
    await r.until((x) => x.committed().at(-1)?.logSeq === last, 10_000, `seq ${last} from the child`);
    expect(seqs(r)).toEqual(range(2, last));
    const contents = r
      .committed()
      .slice(1)
      .map((f) => (f.record.payload.message as { content: string }).content);
    expect(contents.every((c) => c.startsWith('child '))).toBe(true);
  }

  it('LMDB: a stream in this process follows another process appending to the same file (found by polling the head)', async () => {
    const dir = tempDir();
    const store = lmdbStore({ path: dir.path });
    cleanups.push(async () => {
      await store.close();
      await dir.cleanup();
    });
    await followChild('lmdb', dir.path, store);
  });

  describe('PostgreSQL', async () => {
    const db = await postgresForTests('sessionEvents on PostgreSQL');
    it.runIf(db)('PostgreSQL: a stream follows another process appending (LISTEN/NOTIFY wakes it)', async () => {
      const schema = freshSchema('web');
      const store = postgresStore({ connectionString: db!.url, schema });
      cleanups.push(() => store.close());
      await followChild('pg', db!.url, store, [`--schema=${schema}`]);
    });
  });
});

describe('sessionEvents: liveness and bounds', () => {
  it('an idle stream carries heartbeat comments', async () => {
    const r = open(memoryStore(), req(), { heartbeatMs: 30 });
    await r.until((x) => x.parser.comments >= 3, 5000, 'three heartbeats');
  });

  it('a client that stops reading: committed records wait in the log, live frames overflow its capacity and it is dropped, told where to resume', async () => {
    const store = memoryStore();
    await appendN(store, 3);
    const live = new Subject<Envelope>();
    const res = sessionEvents(store, 's1', req(), { capacity: 8, live });
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    while (!text.includes('id: 3\n')) text += dec.decode((await reader.read()).value, { stream: true });
    // the client stops reading; the session goes on: ten more records, then a stream of deltas
    await appendN(store, 10);
    await new Promise((r) => setTimeout(r, 100));
    live.next({ runId: 'r', attemptId: 'a', seq: 1, event: { type: 'message_start', role: 'assistant' } });
    for (let i = 0; i < 20 && live.observed; i++)
      live.next({ runId: 'r', attemptId: 'a', seq: 2 + i, event: { type: 'message_delta', role: 'assistant', text: `t${i} ` } });
    expect(live.observed).toBe(false); // dropped: the connection let go of the live feed
    text += await readAll(reader);
    const events = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    expect(events.at(-1)).toBe('dropped');
    const dropped = JSON.parse(text.trim().split('\n').at(-1)!.slice('data: '.length));
    const lastId = Math.max(...[...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1])));
    expect(dropped).toEqual({ kind: 'dropped', reason: 'capacity', capacity: 8, lastLogSeq: lastId });
    expect(lastId).toBeLessThanOrEqual(3 + 4); // the committed records waited: at most half the queue was theirs
    const again = open(store, req('', { 'Last-Event-ID': String(dropped.lastLogSeq) }));
    await again.until((x) => x.committed().at(-1)?.logSeq === 13, 5000, 'the rest after a reconnect');
    expect(seqs(again)).toEqual(range(lastId + 1, 13));
  });

  it('a client that reads nothing for stallTimeoutMs is dropped as stalled, then a reconnect resumes after lastLogSeq', async () => {
    const store = memoryStore();
    await appendN(store, 30);
    const res = sessionEvents(store, 's1', req(), { capacity: 5, stallTimeoutMs: 50 });
    const reader = res.body!.getReader();
    await new Promise((r) => setTimeout(r, 200));
    const text = await readAll(reader);
    const dropped = JSON.parse(text.trim().split('\n').at(-1)!.slice('data: '.length));
    expect(dropped.reason).toBe('stalled');
    const r = open(store, req('', { 'Last-Event-ID': String(dropped.lastLogSeq) }));
    await r.until((x) => x.committed().at(-1)?.logSeq === 30, 5000, 'the rest');
    expect(seqs(r)[0]).toBe(dropped.lastLogSeq + 1);
  });
});

describe('sessionEvents: live deltas', () => {
  it('deltas of a message begun before the connection are not sent; one begun on it streams, then its committed message', async () => {
    const store = memoryStore();
    const live = new Subject<Envelope>();
    const r = open(store, req(), { live });
    await r.until((x) => x.messages.length >= 1, 5000, 'ready');
    const env = (seq: number, event: Envelope['event'], logSeq?: number): Envelope => ({
      runId: 'r1',
      attemptId: 'a1',
      seq,
      event,
      ...(logSeq ? { logSeq } : {}),
    });
    live.next(env(1, { type: 'message_delta', role: 'assistant', text: 'half ' }));
    live.next(
      env(2, { type: 'message_end', role: 'assistant', message: { role: 'assistant', content: 'x' }, discarded: { reason: 'retry' } }),
    );
    live.next(env(3, { type: 'message_start', role: 'assistant' }));
    live.next(env(4, { type: 'message_delta', role: 'assistant', text: 'whole ' }));
    await r.until((x) => x.messages.filter((m) => m.event === 'live').length === 2, 5000, 'two live frames');
    const lives = r.messages.filter((m) => m.event === 'live');
    expect(lives.map((m) => (m.frame as { event: { type: string } }).event.type)).toEqual(['message_start', 'message_delta']);
    expect(lives.every((m) => m.id === undefined)).toBe(true);
  });

  it('a session running in this runtime: its text deltas come as live frames between committed ones and add up to the committed message', async () => {
    const store = memoryStore();
    const answer = 'The answer is forty two, as computed.';
    const runtime = createRuntime({ store, model: paced(scriptedModel([answer]), 0.2) });
    cleanups.push(() => runtime.close());
    const r = open(store, req(), { live: runtime.liveEnvelopes$('s1'), pollMs: 50 });
    const session = await runtime.openSession('s1');
    const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'q' });
    expect(result.status).toBe('succeeded');
    await r.until((x) => x.committed().some((f) => f.record.type === 'run/end'), 5000, 'run/end');
    const frames = r.messages.map((m) => m.frame);
    const deltas = frames.flatMap((f) => (f.kind === 'live' && f.event.type === 'message_delta' ? [f.event.text] : []));
    expect(deltas.length).toBeGreaterThan(3);
    expect(deltas.join('')).toBe(answer);
    const msgAt = frames.findIndex((f) => f.kind === 'committed' && f.record.type === 'assistant/message');
    const lastDelta = frames.map((f) => f.kind === 'live' && f.event.type === 'message_delta').lastIndexOf(true);
    expect(lastDelta).toBeLessThan(msgAt);
    // each live frame goes out after the log position it follows
    let sent = 0;
    for (const f of frames) {
      if (f.kind === 'committed') sent = f.logSeq;
      if (f.kind === 'live') expect(f.afterLogSeq).toBeLessThanOrEqual(sent);
    }
    expect(seqs(r)).toEqual(range(1, seqs(r).length));
    const runStart = r.committed().find((f) => f.record.type === 'run/start')!;
    expect(runStart.events[0]).toMatchObject({ type: 'run_start', runId: 'r1', sessionInstanceId: session.sessionInstanceId });
  });
});

async function readAll(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<string> {
  const dec = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text;
    text += dec.decode(value, { stream: true });
  }
}
