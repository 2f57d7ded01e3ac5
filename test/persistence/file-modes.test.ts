import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';
import { REPO_ROOT } from '../crash/child-util.js';
import { READER } from './fixtures/damage.js';

/**
 * A store holds whole conversations: every file it creates is 0600 and every directory 0700,
 * whatever the umask (docs/guarantees.md), and so does the CLI's data dir (docs/cli.md). Each umask is set in a child process of its own
 * (`sh -c 'umask …; exec node …'`), which writes a store, goes through a rebuild (another boot
 * id) and reads it back.
 */
const dirs: { cleanup: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.cleanup();
});

function modes(root: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (p: string, rel: string) => {
    const st = statSync(p);
    out.set(rel, (st.mode & 0o777).toString(8));
    if (st.isDirectory()) for (const f of readdirSync(p)) walk(join(p, f), rel ? `${rel}/${f}` : f);
  };
  walk(root, '');
  return out;
}

describe('file modes', () => {
  for (const umask of ['000', '022']) {
    it(`under umask ${umask}: files 0600, directories 0700, after writing and after a rebuild from the journal`, async () => {
      const d = tempDir('actorloop-modes-');
      dirs.push(d);
      const path = join(d.path, 'store');
      const script = join(REPO_ROOT, 'test/persistence/fixtures/write-store.ts');
      const sh = (cmd: string) =>
        spawnSync('sh', ['-c', cmd], { cwd: REPO_ROOT, encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' }, timeout: 120_000 });
      const node = `"${process.execPath}" --import tsx`;
      const w = sh(`umask ${umask} && exec ${node} "${script}" "${path}"`);
      expect(w.status, w.stderr).toBe(0);
      const r = sh(`umask ${umask} && exec ${node} "${READER}" "${path}" another-boot`);
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toContain('"read"');
      const all = modes(path);
      expect([...all.keys()]).toEqual(
        expect.arrayContaining([
          '',
          'data.mdb',
          'lock.mdb',
          'journal',
          'journal/BOOT',
          'journal/0000000001.wal',
          'recovery',
          'recovery/data.mdb',
        ]),
      );
      expectPrivate(path, all);
    });
  }

  it("under umask 022: the demo's data dir, its sandbox and deployment records included, is files 0600 and directories 0700", () => {
    const d = tempDir('actorloop-modes-demo-');
    dirs.push(d);
    const path = join(d.path, 'data');
    const cli = join(REPO_ROOT, 'src/cli/main.ts');
    const r = spawnSync(
      'sh',
      ['-c', `umask 022 && exec "${process.execPath}" --import tsx "${cli}" demo --data "${path}" --provider scripted`],
      {
        cwd: REPO_ROOT,
        encoding: 'utf8',
        env: { ...process.env, NODE_OPTIONS: '', OPENAI_API_KEY: '', ANTHROPIC_API_KEY: '' },
        timeout: 120_000,
      },
    );
    expect(r.status, r.stderr).toBe(0);
    const all = modes(path);
    expect([...all.keys()].some((k) => k.startsWith('demo-deployments/'))).toBe(true);
    expect([...all.keys()].some((k) => k.startsWith('demo-sandbox/'))).toBe(true);
    expectPrivate(path, all);
  });
  // docs/cli.md: `actorloop demo -d .` in a project folder must not lock the folder down; only what
  // actorloop creates is private
  it('an existing folder opened as a data dir keeps its mode; the files and folders actorloop creates in it are 0600 and 0700', () => {
    const d = tempDir('actorloop-modes-existing-');
    dirs.push(d);
    const path = join(d.path, 'project');
    mkdirSync(path);
    chmodSync(path, 0o755);
    const cli = join(REPO_ROOT, 'src/cli/main.ts');
    const r = spawnSync(
      'sh',
      ['-c', `umask 022 && exec "${process.execPath}" --import tsx "${cli}" demo --data "${path}" --provider scripted`],
      {
        cwd: REPO_ROOT,
        encoding: 'utf8',
        env: { ...process.env, NODE_OPTIONS: '', OPENAI_API_KEY: '', ANTHROPIC_API_KEY: '', ACTORLOOP_DEMO_PACE: '0.05' },
        timeout: 120_000,
      },
    );
    expect(r.status, r.stderr).toBe(0);
    const all = modes(path);
    expect(all.get('')).toBe('755');
    all.delete('');
    expect([...all.keys()]).toEqual(expect.arrayContaining(['data.mdb', 'journal', 'recovery', 'demo-sandbox']));
    expectPrivate(path, all);
  });
});

function expectPrivate(root: string, all: Map<string, string>): void {
  for (const [rel, mode] of all) {
    const isDir = statSync(join(root, rel)).isDirectory();
    expect(`${rel || '.'} ${mode}`).toBe(`${rel || '.'} ${isDir ? '700' : '600'}`);
  }
}
