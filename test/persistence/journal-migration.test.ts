import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { lmdbStore } from '../../src/index.js';
import { collect, stepStart, userMsg } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { REPO_ROOT } from '../crash/child-util.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
function dir(): string {
  const d = tempDir('actorloop-second-look-');
  cleanups.push(d.cleanup);
  return d.path;
}

describe('journal: adopting a store without one', () => {
  it('a migration killed after its LMDB transaction committed (before journal.new became journal/) is redone, not refused as a lost journal', async () => {
    const path = dir();
    // a store without a journal, as durability 'committed' (or an older actorloop) leaves it
    const old = lmdbStore({ path, durability: 'committed' });
    const { writerEpoch } = await old.attachWriter('c');
    await old.append('c', writerEpoch, 1, [userMsg('before the journal'), stepStart()]);
    await old.close();

    // A real process opens it 'flushed' and is SIGKILLed during the migration, after the LMDB
    // write transaction that copied the store and recorded the journal state committed, while it
    // writes journal.new/BOOT (before journal.new/ is renamed to journal/).
    const script = join(path, '..', `migrate-kill-${process.pid}-${Date.now()}.mts`);
    writeFileSync(
      script,
      `import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
const real = fs.writeFileSync;
fs.writeFileSync = ((file, ...rest) => {
  if (String(file).includes('journal.new') && String(file).includes('BOOT')) process.kill(process.pid, 'SIGKILL');
  return real(file, ...rest);
});
syncBuiltinESMExports();
const { lmdbStore } = await import(${JSON.stringify(join(REPO_ROOT, 'src/persistence/lmdb-store.ts'))});
lmdbStore({ path: ${JSON.stringify(path)}, bootId: 'boot-1' });
console.log('NOT KILLED');
`,
    );
    cleanups.push(async () => void (await import('node:fs')).rmSync(script, { force: true }));
    const child = spawnSync(process.execPath, ['--import', 'tsx', script], { cwd: REPO_ROOT, env: { ...process.env, NODE_OPTIONS: '' }, encoding: 'utf8', timeout: 60_000 });
    expect(child.signal, child.stderr).toBe('SIGKILL');
    expect(existsSync(join(path, 'journal.new'))).toBe(true);
    expect(existsSync(join(path, 'journal'))).toBe(false);

    // docs/journal-recovery.ts: "an interrupted migration is simply redone"
    let store: ReturnType<typeof lmdbStore> | undefined;
    let error: unknown;
    try {
      store = lmdbStore({ path, bootId: 'boot-1' });
    } catch (e) {
      error = e;
    }
    expect(error === undefined ? 'opened' : `refused: ${String((error as Error).message)}`).toBe('opened');
    expect((await collect(store!.readEvents('c'))).map((e) => e.seq)).toEqual([1, 2]);
    await store!.close();
  }, 90_000);
});
