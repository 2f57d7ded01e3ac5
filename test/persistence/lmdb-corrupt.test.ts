import { randomBytes } from 'node:crypto';
import { open } from 'lmdb';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  isCorruptLogError,
  isUnknownSchemaVersionError,
  type CorruptLogError,
  type UnknownSchemaVersionError,
} from '../../src/contracts/errors.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Bad data on disk gives a typed error naming session and seq — never a silent skip. The records
 * are damaged behind the store's back, through lmdb's own API on the same file (the store is
 * closed first: lmdb-js shares one environment per path within a process).
 */
const S = 'victim';
const OTHER = 'bystander';
const LAST = 6;

let dir: ReturnType<typeof tempDir>;

beforeEach(async () => {
  dir = tempDir('actorloop-corrupt-');
  const store = lmdbStore({ path: dir.path });
  for (const s of [S, OTHER]) {
    const { writerEpoch } = await store.attachWriter(s);
    await store.append(s, writerEpoch, 1, [
      userMsg('one'),
      stepStart(),
      userMsg('three'),
      stepStart(1, 2),
      userMsg('five'),
      userMsg('six'),
    ]);
  }
  await store.close();
});
afterEach(async () => {
  await dir.cleanup();
});

/** Opens the raw LMDB file (store closed), lets `fn` damage it, and closes it again. */
async function tamper(
  fn: (
    events: {
      get(k: [string, number]): string | undefined;
      put(k: [string, number], v: string | Buffer): void;
      del(k: [string, number]): void;
    },
    heads: { put(k: string, v: string): void },
  ) => void,
): Promise<void> {
  const env = open({ path: dir.path, maxDbs: 8 });
  try {
    const events = env.openDB<string, [string, number]>({ name: 'events', encoding: 'string' });
    const binary = env.openDB<Buffer, [string, number]>({ name: 'events', encoding: 'binary' });
    const heads = env.openDB<string, string>({ name: 'heads', encoding: 'string' });
    env.transactionSync(() => {
      fn(
        {
          get: (k) => events.get(k)?.replace(/^#[0-9a-f]{8}/, ''), // the JSON text inside the checksum seal
          put: (k, v) => (typeof v === 'string' ? events.putSync(k, v) : binary.putSync(k, v)),
          del: (k) => events.removeSync(k),
        },
        { put: (k, v) => heads.putSync(k, v) },
      );
    });
  } finally {
    await env.close();
  }
}

/** Reads the session to the end, returning the seqs seen before the error (and the error). */
async function readUntilError(sessionId: string): Promise<{ seen: number[]; error: unknown }> {
  const store = lmdbStore({ path: dir.path });
  const seen: number[] = [];
  try {
    for await (const e of store.readEvents(sessionId)) seen.push(e.seq);
    return { seen, error: undefined };
  } catch (error) {
    return { seen, error };
  } finally {
    await store.close();
  }
}

async function withStore<T>(fn: (store: ReturnType<typeof lmdbStore>) => Promise<T>): Promise<T> {
  const store = lmdbStore({ path: dir.path });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

/** The typed error names session and seq; `reason` (loose, wording may change) when given. */
function expectCorrupt(error: unknown, seq: number, reason?: RegExp): void {
  expect(isCorruptLogError(error), String(error)).toBe(true);
  const e = error as CorruptLogError;
  expect(e.sessionId).toBe(S);
  expect(e.seq).toBe(seq);
  if (reason) expect(e.reason).toMatch(reason);
  expect(e.message).toContain(S);
  expect(e.message).toContain(`seq ${seq}`);
}

/** Every read path must surface the error, and the other session must still read cleanly. */
async function expectEveryReadFails(check: (error: unknown) => void): Promise<void> {
  const { seen, error } = await readUntilError(S);
  check(error);
  // Records are yielded a page at a time: those before the damage may or may not come out first,
  // but nothing at or after the damaged seq does.
  expect(seen, 'nothing from or past the damage is yielded').toEqual([1, 2].slice(0, seen.length));
  const surfaceError = await withStore((st) =>
    st.loadSurface(S).then(
      () => undefined,
      (e: unknown) => e,
    ),
  );
  check(surfaceError);
  const ranged = await withStore((st) =>
    collect(st.readEvents(S, { fromSeq: 3, toSeq: 4 })).then(
      () => undefined,
      (e: unknown) => e,
    ),
  );
  check(ranged);
  expect((await withStore((st) => collect(st.readEvents(OTHER)))).map((e: EventRecord) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
}

describe('LMDB store: damaged records are typed errors, never skipped', () => {
  it('reads the undamaged log (control)', async () => {
    expect((await readUntilError(S)).seen).toEqual([1, 2, 3, 4, 5, 6]);
    expect((await withStore((st) => st.loadSurface(S))).map((e) => e.seq)).toEqual([1, 3, 5, 6]);
  });

  it('truncated JSON → CorruptLogError naming session and seq', async () => {
    await tamper((ev) => {
      const raw = ev.get([S, 3])!;
      ev.put([S, 3], raw.slice(0, Math.floor(raw.length / 2)));
    });
    await expectEveryReadFails((e) => expectCorrupt(e, 3));
  });

  it('garbage text → CorruptLogError', async () => {
    await tamper((ev) => ev.put([S, 3], '\u0000\u00ff}{ not json at all'));
    await expectEveryReadFails((e) => expectCorrupt(e, 3));
  });

  it('random bytes (not even UTF-8) → CorruptLogError', async () => {
    await tamper((ev) => ev.put([S, 3], randomBytes(64)));
    await expectEveryReadFails((e) => expectCorrupt(e, 3));
  });

  it('valid JSON that is not a record → CorruptLogError', async () => {
    await tamper((ev) => ev.put([S, 3], JSON.stringify({ not: 'a record' })));
    await expectEveryReadFails((e) => expectCorrupt(e, 3, /schema/i));
  });

  it("a payload that fails its type's schema → CorruptLogError", async () => {
    await tamper((ev) => {
      const rec = JSON.parse(ev.get([S, 3])!);
      rec.payload = { message: { role: 'wizard', content: 'x' } };
      ev.put([S, 3], JSON.stringify(rec));
    });
    await expectEveryReadFails((e) => expectCorrupt(e, 3, /user\/message/));
  });

  it('a record stored under the wrong key → CorruptLogError', async () => {
    await tamper((ev) => ev.put([S, 3], ev.get([S, 4])!));
    await expectEveryReadFails((e) => expectCorrupt(e, 3));
  });

  it('schemaVersion "2" → UnknownSchemaVersionError naming "2"', async () => {
    await tamper((ev) => {
      const rec = JSON.parse(ev.get([S, 3])!);
      rec.schemaVersion = '2';
      ev.put([S, 3], JSON.stringify(rec));
    });
    await expectEveryReadFails((error) => {
      expect(isUnknownSchemaVersionError(error), String(error)).toBe(true);
      const e = error as UnknownSchemaVersionError;
      expect(e).toMatchObject({ sessionId: S, seq: 3, schemaVersion: '2' });
      expect(e.message).toContain('"2"');
    });
  });

  it('a record of a type this version does not know (a newer actorloop added it) → UnknownSchemaVersionError naming the type', async () => {
    await tamper((ev) => {
      const rec = JSON.parse(ev.get([S, 3])!);
      rec.type = 'future/thing';
      ev.put([S, 3], JSON.stringify(rec));
    });
    await expectEveryReadFails((error) => {
      expect(isUnknownSchemaVersionError(error), String(error)).toBe(true);
      expect(error).toMatchObject({ sessionId: S, seq: 3, schemaVersion: '1', eventType: 'future/thing' });
      expect((error as Error).message).toMatch(/type "future\/thing".*a newer actorloop wrote it.*upgrade actorloop/);
    });
  });

  it('a type not shaped as an event type, or an unknown type with another field wrong → CorruptLogError', async () => {
    await tamper((ev) => {
      const rec = JSON.parse(ev.get([S, 3])!);
      rec.type = 'us\u0000er/message';
      ev.put([S, 3], JSON.stringify(rec));
    });
    await expectEveryReadFails((e) => expectCorrupt(e, 3, /schema/i));
    await tamper((ev) => {
      const rec = JSON.parse(ev.get([S, 3])!);
      rec.type = 'future/thing';
      rec.turn = 'one';
      ev.put([S, 3], JSON.stringify(rec));
    });
    await expectEveryReadFails((e) => expectCorrupt(e, 3, /schema/i));
  });

  it('a record missing in the middle → CorruptLogError naming the missing seq', async () => {
    await tamper((ev) => ev.del([S, 3]));
    await expectEveryReadFails((e) => expectCorrupt(e, 3, /missing/i));
  });

  it('a missing first record → CorruptLogError naming seq 1', async () => {
    await tamper((ev) => ev.del([S, 1]));
    const { seen, error } = await readUntilError(S);
    expect(seen).toEqual([]);
    expectCorrupt(error, 1, /missing/i);
  });

  it('an unreadable head record → CorruptLogError naming the session, for attach and loadSurface', async () => {
    await tamper((_ev, heads) => heads.put(S, '{"sessionId":'));
    await withStore(async (st) => {
      for (const op of [() => st.loadSurface(S), () => st.attachWriter(S), () => st.getHead(S)]) {
        const error = await op().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(isCorruptLogError(error), String(error)).toBe(true);
        expect((error as CorruptLogError).sessionId).toBe(S);
      }
      expect(await st.getHead(OTHER)).toMatchObject({ lastSeq: LAST });
    });
  });

  // A gap with no later record inside the range (the last record(s) lost, or a range ending at
  // the missing record) must not pass for the end of the log: readEvents compares where the
  // records end with the head's lastSeq.
  it('a missing last record (log shorter than its head) → CorruptLogError', async () => {
    await tamper((ev) => ev.del([S, LAST]));
    const { seen, error } = await readUntilError(S);
    expect(seen).toEqual([1, 2, 3, 4, 5].slice(0, seen.length));
    expectCorrupt(error, LAST, /missing/i);
  });

  it('loadSurface of a log shorter than its head → CorruptLogError', async () => {
    await tamper((ev) => ev.del([S, LAST]));
    const surfaceError = await withStore((st) =>
      st.loadSurface(S).then(
        () => undefined,
        (e: unknown) => e,
      ),
    );
    expectCorrupt(surfaceError, LAST, /missing/i);
  });

  it('a range that ends at a missing record → CorruptLogError', async () => {
    await tamper((ev) => ev.del([S, 3]));
    const error = await withStore((st) =>
      collect(st.readEvents(S, { fromSeq: 3, toSeq: 3 })).then(
        () => undefined,
        (e: unknown) => e,
      ),
    );
    expectCorrupt(error, 3, /missing/i);
  });
});
