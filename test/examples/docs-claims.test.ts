import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/program.js';
import { lmdbStore } from '../../src/index.js';
import { SCHEMA_VERSION_PG } from '../../src/persistence/postgres/schema.js';
import { readFileSync } from 'node:fs';
import { tempDir } from '../helpers/tmp.js';

/**
 * Claims made by README.md and docs/, checked against the code. Each `it`
 * quotes the claim it checks.
 */
const dir = tempDir('actorloop-docs-claims-');
afterAll(async () => {
  await dir.cleanup();
});

function capture() {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (s: string) => ((err.text += s), true) };
  return { out, err, onInterrupt: () => () => {} };
}

async function cliHere(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; out: string; err: string }> {
  const io = capture();
  const code = await runCli(['node', 'actorloop', ...args], { ...io, tty: false, env, exitNow: () => {} });
  return { code, out: io.out.text, err: io.err.text };
}

describe('docs claims', () => {
  // docs/event-log.md:15 "`lmdbStore({ path, durability, readPageSize })` | ... one LMDB environment (a directory)";
  // src/persistence/lmdb-store.ts LmdbStoreOptions.path: "Directory of the LMDB environment; created if missing."
  // lmdb-js treats a path whose basename has an extension as a FILE (noSubdir), so the store's own
  // mkdirSync(path) followed by open({ path }) fails with EISDIR for `./my.data`, `/tmp/tmp.Ab12`, `store.v1`, ...
  it('lmdbStore({ path }) works for a directory whose name contains a dot', async () => {
    const path = join(dir.path, 'agent.data');
    let store: ReturnType<typeof lmdbStore> | undefined;
    expect(() => {
      store = lmdbStore({ path });
    }).not.toThrow();
    const { writerEpoch } = await store!.attachWriter('s1');
    expect(writerEpoch).toBe(1);
    await store!.close();
  });

  // same claim, for an existing empty directory (e.g. one made by `mktemp -d`, named /tmp/tmp.XXXXXXXXXX)
  it('lmdbStore({ path }) works on an existing empty directory whose name contains a dot', async () => {
    const path = join(dir.path, 'tmp.hGtd6sqo1h');
    mkdirSync(path);
    let store: ReturnType<typeof lmdbStore> | undefined;
    expect(() => {
      store = lmdbStore({ path });
    }).not.toThrow();
    await store!.close();
  });

  // docs/cli.md:187 "`--data` (`-d`) is the data dir: the LMDB environment holding every session's log"
  // docs/cli.md:194 "0 | done; for `demo`, the run's outcome is `completed`"
  it('actorloop demo --data <dir with a dot> completes (exit 0)', async () => {
    const r = await cliHere(['demo', '--provider', 'scripted', '--data', join(dir.path, 'demo.data')], { ACTORLOOP_DEMO_PACE: '0.02' });
    expect(r.err).not.toMatch(/Is a directory/);
    expect(r.code).toBe(0);
    expect(r.out).toContain('outcome: completed');
  });

  // docs/cli.md:201 "Errors are one line on stderr starting with `actorloop:`." — the table above it
  // lists `--provider gpt` as a bad-arguments error (exit 2). `--from abc` follows the rule; errors
  // caught by commander (bad choice, unknown command or option) print `error: …` plus a hint line.
  it('a bad --provider value is one stderr line starting with "actorloop:" (exit 2)', async () => {
    const r = await cliHere(['demo', '--provider', 'gpt', '--data', join(dir.path, 'unused')]);
    expect(r.code).toBe(2);
    expect(r.err.trimEnd().split('\n')).toHaveLength(1);
    expect(r.err).toMatch(/^actorloop: /);
  });

  // docs/cli.md, `actorloop migrate`: "says which version the schema is at: `migrated from version 0 to N`"
  it("docs/cli.md's migrate messages name the schema version this actorloop migrates to", () => {
    const text = readFileSync('docs/cli.md', 'utf8').replace(/\s+/g, ' ');
    const versions = [...text.matchAll(/migrated from version 0 to (\d+)|is at version (\d+): nothing to do/g)].map((m) =>
      Number(m[1] ?? m[2]),
    );
    expect(versions.length).toBeGreaterThanOrEqual(2);
    expect(new Set(versions)).toEqual(new Set([SCHEMA_VERSION_PG]));
  });
});
