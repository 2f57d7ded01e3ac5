/**
 * Child of store-damage.test.ts: opens a (possibly damaged) LMDB store, reads every session's log
 * and compares it with what was acknowledged. Prints one JSON line: `same`, `typed-error` (an
 * exported actorloop error, with its name) or `different` / `untyped-error` (what must never be).
 * A damaged B-tree page may kill this process by a signal instead: the parent then asks verify.
 */
import { readFileSync } from 'node:fs';
import { ActorloopError, lmdbStore } from '../../src/index.js';

const [dir, expectedFile] = process.argv.slice(2) as [string, string];
const expected = JSON.parse(readFileSync(expectedFile, 'utf8')) as Record<string, string[]>;

async function main(): Promise<Record<string, unknown>> {
  const store = lmdbStore({ path: dir });
  try {
    const got = new Map<string, string[]>();
    for (const s of await store.listSessions()) {
      const lines: string[] = [];
      for await (const e of store.readEvents(s)) lines.push(JSON.stringify([e.seq, e.eventId, e.type, e.payload]));
      got.set(s, lines);
    }
    for (const [s, lines] of Object.entries(expected)) {
      const have = got.get(s);
      if (!have || have.length !== lines.length || have.some((l, i) => l !== lines[i]))
        return { result: 'different', session: s, have: have?.length ?? 0, want: lines.length };
    }
    return { result: 'same' };
  } finally {
    await store.close().catch(() => undefined);
  }
}

main().then(
  (r) => console.log(JSON.stringify(r)),
  (e: unknown) =>
    console.log(
      JSON.stringify(
        e instanceof ActorloopError
          ? { result: 'typed-error', name: e.name, message: e.message }
          : { result: 'untyped-error', message: String((e as Error)?.stack ?? e) },
      ),
    ),
);
