import { open } from 'lmdb';
import { afterEach, describe, expect, it } from 'vitest';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isCorruptLogError, isStoreClosedError, isStoreError, isValidationError, type StoreError } from '../../src/contracts/errors.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { createRuntime, scriptedModel, ValidationError } from '../../src/index.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { memoryStore } from '../../src/persistence/memory-store.js';
import { userMsg } from '../helpers/drafts.js';
import { lmdbRuntime, logOf } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';
import { expectValidation } from '../helpers/validation.js';

// Both EventStore backends refuse input they could not store faithfully, and never return a
// record other than the one asked for.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const dirs: ReturnType<typeof tempDir>[] = [];
const dir = () => {
  const d = tempDir('actorloop-store-');
  dirs.push(d);
  return d;
};
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.cleanup();
});

const settle = <T>(p: Promise<T>): Promise<T | unknown> =>
  p.then(
    (v) => v,
    (e: unknown) => e,
  );

describe('drafts the stores refuse', () => {
  it('refuses a draft turn beyond Number.MAX_SAFE_INTEGER with ValidationError, and the LMDB session stays writable', async () => {
    const d = dir();
    const store = lmdbStore({ path: d.path });
    try {
      const { writerEpoch } = await store.attachWriter('s');
      const appended = await settle(store.append('s', writerEpoch, 1, [userMsg('a', 1e20)]));
      // The session must remain usable whatever the append did.
      expect(await settle(store.attachWriter('s'))).toMatchObject({ writerEpoch: 2 });
      expect(isValidationError(appended), String(appended)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it("refuses an eventId too long for the LMDB index with ValidationError, without failing other sessions' appends in the same group commit", async () => {
    const d = dir();
    const store = lmdbStore({ path: d.path });
    try {
      const s = await store.attachWriter('s');
      const t = await store.attachWriter('t');
      const [bad, innocent] = await Promise.all([
        settle(store.append('s', s.writerEpoch, 1, [{ ...userMsg('a'), eventId: 'x'.repeat(3000) }])),
        settle(store.append('t', t.writerEpoch, 1, [userMsg('unrelated')])),
      ]);
      expect(Array.isArray(innocent) ? 'appended' : String(innocent)).toBe('appended');
      expect(isValidationError(bad), String(bad)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('refuses a payload that is not JSON (BigInt, cycle) with ValidationError', async () => {
    const store = memoryStore();
    const { writerEpoch } = await store.attachWriter('s');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    for (const args of [{ n: 1n }, cyclic]) {
      const draft = {
        type: 'tool/call',
        turn: 1,
        step: 1,
        attempt: 1,
        surfaceOp: 'none',
        payload: { callId: 'c1', name: 'echo', arguments: args, mode: 'exclusive', resources: [], idempotencyKey: 'k1' },
      } as EventDraft;
      const err = await settle(store.append('s', writerEpoch, 1, [draft]));
      expect(isValidationError(err), String(err)).toBe(true);
    }
    await store.close();
  });

  it('store.append with a draft whose getter throws gives a ValidationError, with nothing written', async () => {
    const store = memoryStore();
    cleanups.push(() => store.close());
    const { writerEpoch } = await store.attachWriter('s1');
    const draft = {
      type: 'step/start',
      step: 1,
      attempt: 1,
      surfaceOp: 'none',
      payload: {},
      get turn(): number {
        throw new Error('getter boom');
      },
    };
    await expectValidation(store.append('s1', writerEpoch, 1, [draft as never]), 'turn');
    expect(await logOf(store, 's1')).toEqual([]);
  });
});

describe('the path lmdbStore opens', () => {
  it('a path with a NUL character is a ValidationError; a file, a path under one, or one whose files cannot be opened, a StoreError naming the path', async () => {
    const nul = (() => {
      try {
        return lmdbStore({ path: '/tmp/a\u0000b' });
      } catch (e) {
        return e;
      }
    })();
    expect(isValidationError(nul), String(nul)).toBe(true);
    expect((nul as ValidationError).issues).toEqual([{ path: ['path'], message: expect.stringContaining('"/tmp/a\\u0000b"') }]);
    const d = dir();
    const file = join(d.path, 'a-file');
    writeFileSync(file, 'not a store');
    for (const path of [file, join(file, 'below')]) {
      const e = (() => {
        try {
          return lmdbStore({ path });
        } catch (x) {
          return x;
        }
      })();
      expect(isStoreError(e), String(e)).toBe(true);
      expect((e as StoreError).where).toBe(path);
      expect((e as Error).message).toMatch(/not a directory/);
    }
    expect(readFileSync(file, 'utf8')).toBe('not a store');
    // a directory whose data file cannot be opened (here, a directory itself)
    const odd = join(d.path, 'odd');
    mkdirSync(join(odd, 'data.mdb'), { recursive: true });
    for (const durability of ['flushed', 'committed'] as const) {
      const e = (() => {
        try {
          return lmdbStore({ path: odd, durability });
        } catch (x) {
          return x;
        }
      })();
      expect(isStoreError(e), String(e)).toBe(true);
      expect(e).toMatchObject({ where: odd, reason: expect.stringMatching(/cannot be opened: EISDIR/) });
    }
  });
});

describe('session ids the stores refuse', () => {
  it('a session id with a lone surrogate is a ValidationError in every store and in runtime.submit, before anything is written', async () => {
    const d = dir();
    for (const store of [memoryStore(), lmdbStore({ path: d.path })]) {
      try {
        for (const id of ['user-\ud800', 'user-\udc00x']) {
          for (const call of [
            () => store.attachWriter(id),
            () => store.getHead(id),
            () => store.work!.submit(id, { kind: 'input', inputId: 'i', mode: 'follow_up', message: 'x' }),
          ]) {
            const err = await settle(Promise.resolve().then(call as () => Promise<unknown>));
            expect(isValidationError(err), String(err)).toBe(true);
            expect((err as ValidationError).issues[0]!.message).toContain('lone surrogate');
          }
        }
        // a well-formed pair is a valid id
        expect((await store.attachWriter('user-\ud83d\ude00')).writerEpoch).toBe(1);
        expect(await store.listSessions()).toEqual(['user-\ud83d\ude00']);
        const runtime = createRuntime({ store });
        const err = await settle(runtime.submit('user-\ud800', 'hi'));
        expect(isValidationError(err), String(err)).toBe(true);
      } finally {
        await store.close();
      }
    }
  });
});

describe('reads', () => {
  it('getEventById refuses a non-string eventId with ValidationError', async () => {
    const d = dir();
    for (const store of [memoryStore(), lmdbStore({ path: d.path })]) {
      try {
        const err = await settle(store.getEventById('s', 5 as unknown as string));
        expect(isValidationError(err), String(err)).toBe(true);
      } finally {
        await store.close();
      }
    }
  });

  it('store.events$(sessionId, null) throws a ValidationError, not a TypeError (both stores)', async () => {
    const store = memoryStore();
    cleanups.push(() => store.close());
    expect(() => store.events$('s1', null as never)).toThrow(ValidationError);
    const { store: lmdb } = lmdbRuntime({ model: scriptedModel([]) });
    expect(() => lmdb.events$('s1', null as never)).toThrow(ValidationError);
  });

  it('a readEvents interrupted by close() ends with StoreClosedError, never as a silently shorter log', async () => {
    const d = dir();
    const store = lmdbStore({ path: d.path, readPageSize: 2 });
    const { writerEpoch } = await store.attachWriter('s');
    await store.append(
      's',
      writerEpoch,
      1,
      Array.from({ length: 10 }, (_, i) => userMsg(String(i))),
    );
    const seen: number[] = [];
    let error: unknown;
    try {
      for await (const e of store.readEvents('s')) {
        seen.push(e.seq);
        if (e.seq === 1) await store.close();
      }
    } catch (e) {
      error = e;
    }
    // Either the whole log, or a typed error: a reader must be able to tell truncation from the end.
    if (seen.length !== 10) expect(isStoreClosedError(error), `read ${seen.join(',')} then ${String(error)}`).toBe(true);
  });

  it('an id-index entry pointing at a record with another eventId is a CorruptLogError, not that other event', async () => {
    const d = dir();
    let store = lmdbStore({ path: d.path });
    const { writerEpoch } = await store.attachWriter('s');
    await store.append('s', writerEpoch, 1, [userMsg('generated id')]);
    await store.append('s', writerEpoch, 2, [{ ...userMsg('mine'), eventId: 'mine' }]);
    await store.close();
    // damage the index behind the store's back: 'mine' now points at seq 1
    const env = open({ path: d.path, maxDbs: 8 });
    env.openDB({ name: 'ids' }).putSync(['s', 'mine'], 1);
    await env.close();
    store = lmdbStore({ path: d.path });
    try {
      const got = await settle(store.getEventById('s', 'mine'));
      expect(isCorruptLogError(got), `got ${JSON.stringify(got)}`).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('memoryStore.getHead returns a copy: mutating it does not change the stored head', async () => {
    const store = memoryStore();
    const { writerEpoch } = await store.attachWriter('s');
    await store.append('s', writerEpoch, 1, [
      {
        type: 'run/start',
        turn: 1,
        step: 0,
        attempt: 1,
        surfaceOp: 'none',
        payload: { runId: 'r1', attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f'.repeat(64) },
      },
    ]);
    const head = (await store.getHead('s'))!;
    head.openRun!.runId = 'mutated by a caller';
    expect((await store.getHead('s'))!.openRun).toMatchObject({ runId: 'r1' });
    await store.close();
  });
});
