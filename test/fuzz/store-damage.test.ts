import { spawnSync } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { lmdbStore, repairStore, verifyStore } from '../../src/index.js';
import { REPO_ROOT } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';
import { FUZZ, fuzz } from './fuzz-lib.js';

const dir = tempDir('actorloop-damage-');
afterAll(() => dir.cleanup());

const READER = join(REPO_ROOT, 'test/fuzz/damaged-store-reader.ts');
/** How long a reader of a damaged store may take before it counts as a hang. */
const READ_MS = 30_000;

/** A store with two sessions' acknowledged events, and what reading each back must give. */
async function pristineStore(): Promise<{ path: string; expectedFile: string }> {
  const path = join(dir.path, 'pristine');
  const store = lmdbStore({ path });
  const expected: Record<string, string[]> = {};
  for (const s of ['alpha', 'beta']) {
    const { writerEpoch, lastSeq } = await store.attachWriter(s);
    let next = lastSeq + 1;
    for (let b = 0; b < 6; b++) {
      const drafts = Array.from({ length: 3 }, (_, i) => ({
        type: 'user/message' as const,
        turn: 0,
        step: 0,
        attempt: 0,
        surfaceOp: 'append' as const,
        payload: { message: { role: 'user' as const, content: `${s} batch ${b} message ${i} ${'x'.repeat(40 * i)}` } },
      }));
      const recs = await store.append(s, writerEpoch, next, drafts);
      next = recs.at(-1)!.seq + 1;
    }
    expected[s] = [];
    for await (const e of store.readEvents(s)) expected[s]!.push(JSON.stringify([e.seq, e.eventId, e.type, e.payload]));
  }
  await store.close();
  const expectedFile = join(dir.path, 'expected.json');
  writeFileSync(expectedFile, JSON.stringify(expected));
  return { path, expectedFile };
}

/** The store's files that damage may hit: data.mdb and each journal segment. */
function damageable(path: string): string[] {
  const journal = join(path, 'journal');
  return [
    'data.mdb',
    ...readdirSync(journal)
      .filter((f) => /^\d+/.test(f))
      .map((f) => join('journal', f)),
  ];
}

type Damage = { file: number; kind: 'flip' | 'zero' | 'truncate'; at: number; bit: number; length: number };

const damageArb = fc.record({
  file: fc.nat(),
  kind: fc.constantFrom<'flip' | 'zero' | 'truncate'>('flip', 'zero', 'truncate'),
  at: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
  bit: fc.integer({ min: 0, max: 7 }),
  length: fc.integer({ min: 1, max: 4096 }),
});

function applyDamage(copy: string, d: Damage): string {
  const files = damageable(copy);
  const rel = files[d.file % files.length]!;
  const file = join(copy, rel);
  const size = statSync(file).size;
  const at = Math.floor(d.at * size);
  if (d.kind === 'truncate') truncateSync(file, at);
  else {
    const bytes = readFileSync(file);
    if (d.kind === 'flip') bytes[at] = bytes[at]! ^ (1 << d.bit);
    else bytes.fill(0, at, Math.min(size, at + d.length));
    writeFileSync(file, bytes);
  }
  return rel;
}

/** Reads the store in a child process: its printed result, or how it died. */
function readInChild(
  path: string,
  expectedFile: string,
): { result?: string; name?: string; signal?: string | null; timedOut?: boolean; raw: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', READER, path, expectedFile], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
    timeout: READ_MS,
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  const raw = `${r.stdout ?? ''}${r.stderr ?? ''}`.slice(-2000);
  if (r.error && (r.error as NodeJS.ErrnoException).code === 'ETIMEDOUT') return { timedOut: true, raw };
  if (r.signal) return { signal: r.signal, raw };
  const line = (r.stdout ?? '').trim().split('\n').at(-1) ?? '';
  try {
    return { ...(JSON.parse(line) as { result: string; name?: string }), raw };
  } catch {
    return { result: 'no-output', raw };
  }
}

describe('byte damage to a copy of a store (fuzz)', () => {
  it(
    'a damaged store never hangs its reader and never reads back changed or missing events without a typed error; a reader killed by a damaged page is named by verify and repair restores the log',
    async () => {
      const { path, expectedFile } = await pristineStore();
      let n = 0;
      const tally = new Map<string, number>();
      const count = (k: string) => tally.set(k, (tally.get(k) ?? 0) + 1);
      await fuzz('store-damage/lmdb', damageArb, async (d) => {
        const copy = join(dir.path, `case-${n++}`);
        cpSync(path, copy, { recursive: true });
        const rel = applyDamage(copy, d);
        const read = readInChild(copy, expectedFile);
        const what = `${d.kind} of ${rel} at ${d.at.toFixed(4)}: ${read.raw}`;
        expect(read.timedOut, `reader hung: ${what}`).toBeFalsy();
        count(read.signal ? `killed (${read.signal})` : `${read.result}${read.name ? ` ${read.name}` : ''}`);
        if (read.signal) {
          // only a damaged data file may kill a reader; verify names it, repair rebuilds from the journal
          expect(rel, `killed by ${read.signal}: ${what}`).toBe('data.mdb');
          const report = await verifyStore(copy);
          expect(report.ok, `verify missed what killed the reader: ${what}`).toBe(false);
          await repairStore(copy);
          expect(readInChild(copy, expectedFile).result, `after repair: ${what}`).toBe('same');
          return;
        }
        expect(['same', 'typed-error'], what).toContain(read.result);
      });
      console.log(`[fuzz] store-damage/lmdb outcomes: ${[...tally].map(([k, v]) => `${k} × ${v}`).join(', ')}`);
    },
    FUZZ.timeLimitMs === undefined ? 0 : 300_000,
  );
});
