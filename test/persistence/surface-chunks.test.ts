import { contentText } from '../../src/contracts/content.js';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime, defineTool, repairStore, scriptedModel, verifyStore, type ScriptedStep } from '../../src/index.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { seal } from '../../src/persistence/checksum.js';
import { openDbs, readState } from '../../src/persistence/journal-recovery.js';
import { segmentFiles } from './fixtures/damage.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { CHUNK_SEQS } from '../../src/persistence/surface-chunks.js';
import { Surface } from '../../src/persistence/surface.js';
import { compaction, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDirs } from '../helpers/temp-dirs.js';

/**
 * The LMDB store keeps the surface as chunks of messages (src/persistence/surface-chunks.ts) so
 * that opening a session reads a few values, not every record since the surface epoch. The
 * chunks are a cache of the records: opening from them gives exactly the surface the records
 * give (messages, their seqs, token estimate, request digest), and a chunk missing or damaged is
 * replaced by the records it covers.
 */
const dir = tempDirs('actorloop-chunks-');

const toolResult = (callId: string, content: string): EventDraft => ({
  type: 'tool/result',
  turn: 1,
  step: 1,
  attempt: 1,
  surfaceOp: 'append',
  payload: {
    callId,
    name: 'lookup',
    outcome: { kind: 'completed', content, isError: false, concludesTurn: false, releaseResources: [] },
    startedAt: 1,
    endedAt: 2,
  },
});
const rejected = (n: number): EventDraft => ({
  type: 'tool/batch-rejected',
  turn: 1,
  step: 1,
  attempt: 1,
  surfaceOp: 'append',
  payload: {
    issues: [
      { callId: `r${n}a`, name: 'x', message: 'unknown tool' },
      { callId: `r${n}b`, name: 'y', message: 'bad json' },
    ],
  },
});

/** `n` drafts: step markers (off the surface), user messages, tool results, a two-message rejection now and then. */
function drafts(n: number, from = 0): EventDraft[] {
  return Array.from({ length: n }, (_, k) => {
    const i = from + k;
    return i % 3 === 0
      ? stepStart()
      : i % 7 === 1
        ? rejected(i)
        : i % 2 === 0
          ? userMsg(`message ${i} “ünïcode” \n and a newline`)
          : toolResult(`c${i}`, `result ${i}`);
  });
}

async function appendAll(path: string, sessionId: string, all: EventDraft[], batch: number): Promise<void> {
  const store = lmdbStore({ path });
  try {
    const { writerEpoch, lastSeq } = await store.attachWriter(sessionId);
    let next = lastSeq + 1;
    for (let i = 0; i < all.length; i += batch) next += (await store.append(sessionId, writerEpoch, next, all.slice(i, i + batch))).length;
  } finally {
    await store.close();
  }
}

/** The surface opened from the chunks and from the records alone, and how many chunks were used. */
async function bothWays(path: string, sessionId: string) {
  const store = lmdbStore({ path });
  try {
    const stored = await store.loadStoredSurface(sessionId);
    const fromChunks = new Surface();
    fromChunks.load(stored);
    const fromRecords = new Surface();
    fromRecords.load({ chunks: [], records: await store.loadSurface(sessionId) });
    return { fromChunks, fromRecords, chunks: stored.chunks, tail: stored.records.length };
  } finally {
    await store.close();
  }
}

function expectSame(a: Surface, b: Surface): void {
  expect(a.messages).toEqual(b.messages);
  expect(a.seqs).toEqual(b.seqs);
  expect({ tokens: a.tokens, lastSeq: a.lastSeq, epochSeq: a.epochSeq, epochType: a.epochType }).toEqual({
    tokens: b.tokens,
    lastSeq: b.lastSeq,
    epochSeq: b.epochSeq,
    epochType: b.epochType,
  });
  expect(a.requestDigest('prefix', 'tools')).toBe(b.requestDigest('prefix', 'tools'));
}

describe('surface chunks (LMDB)', () => {
  it('opening from the chunks gives the surface the records give, whatever the append sizes', async () => {
    for (const batch of [1, 7, 2500]) {
      const path = dir();
      await appendAll(path, 's', drafts(3 * CHUNK_SEQS + 100), batch);
      const { fromChunks, fromRecords, chunks, tail } = await bothWays(path, 's');
      expect(
        chunks.map((c) => [c.fromSeq, c.toSeq]),
        `appends of ${batch}`,
      ).toEqual([
        [1, CHUNK_SEQS],
        [CHUNK_SEQS + 1, 2 * CHUNK_SEQS],
        [2 * CHUNK_SEQS + 1, 3 * CHUNK_SEQS],
      ]);
      expect(tail).toBeLessThan(101);
      expectSame(fromChunks, fromRecords);
      expect(fromChunks.messages.length).toBeGreaterThan(2 * CHUNK_SEQS);
    }
  });

  it('a surface epoch inside a bucket starts the chunks at the epoch; older chunks are not read', async () => {
    const path = dir();
    const before = drafts(CHUNK_SEQS + 300);
    await appendAll(path, 's', [...before, compaction('the summary', 900), ...drafts(2 * CHUNK_SEQS, 5)], 50);
    const epochSeq = before.length + 1;
    const { fromChunks, fromRecords, chunks } = await bothWays(path, 's');
    expect(chunks[0]).toMatchObject({ fromSeq: epochSeq, toSeq: 2 * CHUNK_SEQS, epochSeq, epochType: 'compaction' });
    expect(chunks.every((c) => c.epochSeq === epochSeq)).toBe(true);
    expect(fromChunks.messages[0]).toEqual({ role: 'user', content: 'the summary' });
    expect({ epochSeq: fromChunks.epochSeq, epochType: fromChunks.epochType }).toEqual({ epochSeq, epochType: 'compaction' });
    expectSame(fromChunks, fromRecords);
  });

  it('a bucket begun by another store object is read back from the log when it completes', async () => {
    const path = dir();
    const all = drafts(2 * CHUNK_SEQS);
    await appendAll(path, 's', all.slice(0, 700), 100);
    await appendAll(path, 's', all.slice(700), 100); // a new store object: the open bucket is not in its memory
    const { fromChunks, fromRecords, chunks } = await bothWays(path, 's');
    expect(chunks.length).toBe(2);
    expectSame(fromChunks, fromRecords);
  });

  it('a damaged chunk is not used: open reads the records it covers, and the chunks after it are not used either', async () => {
    const path = dir();
    await appendAll(path, 's', drafts(3 * CHUNK_SEQS), 64);
    const dbs = openDbs(path);
    const key: [string, number] = ['s', CHUNK_SEQS + 1];
    const value = dbs.surface!.get(key)!;
    dbs.surface!.putSync(key, value.replace('result', 'resulT'));
    await dbs.env.close();
    const { fromChunks, fromRecords, chunks, tail } = await bothWays(path, 's');
    expect(chunks.map((c) => c.fromSeq)).toEqual([1]);
    expect(tail).toBeGreaterThan(CHUNK_SEQS);
    expectSame(fromChunks, fromRecords);
    expect(fromChunks.messages.some((m) => contentText(m.content).includes('resulT'))).toBe(false);
    // that open wrote the chunks it read the records of back, over the damaged one
    const again = await bothWays(path, 's');
    expect(again.chunks.map((c) => c.fromSeq)).toEqual([1, CHUNK_SEQS + 1, 2 * CHUNK_SEQS + 1]);
    expectSame(again.fromChunks, again.fromRecords);
  });

  it('verify passes a store that has no surface chunk database (written before chunks existed)', async () => {
    const path = dir();
    await appendAll(path, 's', drafts(CHUNK_SEQS + 10), 64);
    const dbs = openDbs(path);
    await dbs.surface!.drop();
    await dbs.env.close();
    expect(await verifyStore(path)).toMatchObject({ ok: true });
  });

  it('a chunk never holds an append that was not stored: a failed transaction forgets the buckets it followed', async () => {
    const path = dir();
    const msg = (c: string): EventDraft => ({
      type: 'user/message',
      turn: 1,
      step: 1,
      attempt: 1,
      surfaceOp: 'append',
      payload: { message: { role: 'user', content: c } },
    });
    const a = lmdbStore({ path });
    let { writerEpoch } = await a.attachWriter('s');
    let next = 1;
    for (let i = 0; i < 3; i++)
      next += (
        await a.append(
          's',
          writerEpoch,
          next,
          Array.from({ length: 100 }, (_, k) => msg(`a${next + k}`)),
        )
      ).length;
    // an append that shares its transaction with an op failing after it wrote: rejected, nothing stored
    const lost = a.append(
      's',
      writerEpoch,
      next,
      Array.from({ length: 10 }, (_, k) => msg(`lost ${next + k}`)),
    );
    const failing = (a as unknown as { enqueue(op: { run(txn: { dirty: boolean }): void }): Promise<void> }).enqueue({
      run: (txn) => {
        txn.dirty = true;
        throw new Error('an op that fails after writing');
      },
    });
    await expect(lost).rejects.toThrow();
    await failing.catch(() => {});
    // another writer appends as many records at the same seqs, then this one takes the session back
    const b = lmdbStore({ path });
    const other = await b.attachWriter('s');
    await b.append(
      's',
      other.writerEpoch,
      next,
      Array.from({ length: 10 }, (_, k) => msg(`stored ${next + k}`)),
    );
    await b.close();
    next += 10;
    ({ writerEpoch } = await a.attachWriter('s'));
    await a.append(
      's',
      writerEpoch,
      next,
      Array.from({ length: CHUNK_SEQS - next + 1 }, (_, k) => msg(`a${next + k}`)),
    );
    await a.close();
    const { fromChunks, fromRecords, chunks } = await bothWays(path, 's');
    expect(chunks.length).toBe(1);
    expect(fromChunks.messages.some((m) => contentText(m.content).startsWith('lost'))).toBe(false);
    expectSame(fromChunks, fromRecords);
  });

  it("a new surface epoch removes the older epoch's chunks", async () => {
    const path = dir();
    await appendAll(path, 's', [...drafts(2 * CHUNK_SEQS + 10), compaction('the summary', 2000), ...drafts(CHUNK_SEQS)], 64);
    const dbs = openDbs(path);
    const keys = [...dbs.surface!.getKeys()];
    await dbs.env.close();
    expect(keys).toEqual([['s', 2 * CHUNK_SEQS + 11]]);
    // one append that completes buckets of two epochs and begins a third keeps only the last one's
    const path2 = dir();
    const all = drafts(3100);
    all[99] = compaction('first', 90);
    all[2099] = compaction('second', 2090);
    await appendAll(path2, 's', all, 3100);
    const dbs2 = openDbs(path2);
    const keys2 = [...dbs2.surface!.getKeys()];
    await dbs2.env.close();
    expect(keys2).toEqual([['s', 2100]]);
  });

  it("verify checks a chunk's epoch against the log, and repair mends chunks and a damaged journal in one run", async () => {
    const path = dir();
    await appendAll(path, 's', [compaction('a summary', 0), ...drafts(2 * CHUNK_SEQS)], 64);
    const dbs = openDbs(path);
    const key: [string, number] = ['s', CHUNK_SEQS + 1];
    const text = dbs.surface!.get(key)!.slice(9);
    dbs.surface!.putSync(key, seal(text.replace('"epochType":"compaction"', '"epochType":"checkpoint/loaded"')));
    const state = readState(dbs, path);
    await dbs.env.close();
    const report = await verifyStore(path);
    expect(!report.ok && report.problems).toEqual([
      {
        where: 'surface',
        sessionId: 's',
        seq: CHUNK_SEQS + 1,
        reason: expect.stringMatching(/its epoch \(seq 1, checkpoint\/loaded\) is not the log's \(compaction at seq 1\)/),
      },
    ]);
    const { openSync, writeSync, closeSync } = await import('node:fs');
    const fd = openSync(segmentFiles(path)[state.segment - 1]!, 'r+');
    writeSync(fd, Buffer.alloc(1500), 0, 1500, state.offset - 1500); // the last few frames' bytes gone
    closeSync(fd);
    const repaired = await repairStore(path);
    expect(repaired.before.ok === false && [...new Set(repaired.before.problems.map((p) => p.where))].sort()).toEqual([
      'journal',
      'surface',
    ]);
    expect(repaired).toMatchObject({ repaired: true, after: { ok: true } });
  });

  it("verify reports a chunk whose messages are not its records' (checksum intact), and repair drops it", async () => {
    const path = dir();
    await appendAll(path, 's', drafts(2 * CHUNK_SEQS), 64);
    expect(await verifyStore(path)).toMatchObject({ ok: true });
    const dbs = openDbs(path);
    const key: [string, number] = ['s', CHUNK_SEQS + 1];
    const text = dbs.surface!.get(key)!.slice(9); // unsealed: a writer's mistake, not a bit flip
    dbs.surface!.putSync(key, seal(text.replace('result', 'resulT')));
    await dbs.env.close();
    const report = await verifyStore(path);
    expect(report.ok).toBe(false);
    expect(!report.ok && report.problems).toEqual([
      {
        where: 'surface',
        sessionId: 's',
        seq: CHUNK_SEQS + 1,
        reason: expect.stringMatching(/surface chunk .* differ from those of the records/),
      },
    ]);
    // a cache: repair drops the chunks, data.mdb is not rebuilt
    expect(await repairStore(path)).toMatchObject({
      repaired: true,
      actions: [expect.stringMatching(/dropped the surface chunks/)],
      after: { ok: true },
    });
    const { fromChunks, fromRecords, chunks } = await bothWays(path, 's');
    expect(chunks).toEqual([]);
    expectSame(fromChunks, fromRecords);
    expect(await verifyStore(path)).toMatchObject({ ok: true }); // the chunks that open wrote back
  });

  it('a store rebuilt from its journal has no chunks: its first open reads the records and writes the chunks back', async () => {
    const path = dir();
    const all = drafts(2 * CHUNK_SEQS + 500);
    await appendAll(path, 's', [...all.slice(0, 700), compaction('the summary', 600), ...all.slice(700)], 64);
    const rebuilt = lmdbStore({ path, bootId: 'after-a-restart' }); // a new boot id: rebuilt from the journal
    await rebuilt.close();
    const first = await bothWays(path, 's');
    expect(first.chunks).toEqual([]);
    expectSame(first.fromChunks, first.fromRecords);
    const again = await bothWays(path, 's');
    expect(again.chunks.map((c) => [c.fromSeq, c.toSeq, c.epochSeq, c.epochType])).toEqual([
      [701, CHUNK_SEQS, 701, 'compaction'],
      [CHUNK_SEQS + 1, 2 * CHUNK_SEQS, 701, 'compaction'],
    ]);
    expectSame(again.fromChunks, again.fromRecords);
    expect(await verifyStore(path)).toMatchObject({ ok: true });
  });

  it("a session reopened from chunks sends the live process's request and records its digest", async () => {
    const echo = defineTool({
      name: 'echo',
      description: 'echoes',
      mode: 'parallel',
      parameters: z.object({ i: z.number() }),
      execute: ({ i }) => `echo ${i}`,
    });
    const steps = (n: number): ScriptedStep[] => [
      ...Array.from({ length: n }, (_, i) => ({ toolCalls: [{ name: 'echo', arguments: { i } }] })),
      'done',
    ];
    const run = (n: number, id: string) => ({ kind: 'prompt' as const, runId: id, attemptId: id, message: `run ${id}` });
    const path = dir();
    // one process: a long run, then a short one in the same runtime (the live surface)
    const live = scriptedModel([...steps(CHUNK_SEQS / 4), ...steps(1)]);
    const rt = createRuntime({
      store: lmdbStore({ path }),
      model: live,
      tools: [echo],
      budget: { maxSteps: CHUNK_SEQS },
      config: { contextWindow: 10_000_000 },
    });
    const s = await rt.openSession('s');
    expect((await s.execute(run(0, 'r1'))).status).toBe('succeeded');
    const surfaceAfterR1 = s.snapshot().messages;
    expect((await s.execute(run(1, 'r2'))).status).toBe('succeeded');
    await rt.close();
    // another path holding only r1, reopened in a new process-like runtime, then r2
    const path2 = dir();
    const rt1 = createRuntime({
      store: lmdbStore({ path: path2 }),
      model: scriptedModel(steps(CHUNK_SEQS / 4)),
      tools: [echo],
      budget: { maxSteps: CHUNK_SEQS },
      config: { contextWindow: 10_000_000 },
    });
    expect((await (await rt1.openSession('s')).execute(run(0, 'r1'))).status).toBe('succeeded');
    await rt1.close();
    const store2 = lmdbStore({ path: path2 });
    expect((await store2.loadStoredSurface('s')).chunks.length).toBeGreaterThan(0);
    const reopened = scriptedModel(steps(1));
    const rt2 = createRuntime({
      store: store2,
      model: reopened,
      tools: [echo],
      budget: { maxSteps: CHUNK_SEQS },
      config: { contextWindow: 10_000_000 },
    });
    const s2 = await rt2.openSession('s');
    expect(s2.snapshot().messages).toEqual(surfaceAfterR1);
    expect((await s2.execute(run(1, 'r2'))).status).toBe('succeeded');
    expect(reopened.requests.map((r) => r.messages)).toEqual(live.requests.slice(-2).map((r) => r.messages));
    const digests = async (p: string) => {
      const st = lmdbStore({ path: p });
      const out: unknown[] = [];
      for await (const e of st.readEvents('s')) if (e.type === 'assistant/message') out.push(e.payload.requestDigest);
      await st.close();
      return out.slice(-2);
    };
    await rt2.close();
    expect(await digests(path2)).toEqual(await digests(path));
  });
});
