import { execFile, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { command, commandPrefix, runnable, setCommandPrefix } from '../../src/cli/invocation.js';
import { lmdbStore } from '../../src/index.js';
import { REPO_ROOT } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('actorloop-invocation-');
afterAll(async () => {
  await dir.cleanup();
});

/** The environment of a shell outside npm: no npm_* variables. */
const plainEnv = (): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('npm_') && k !== 'NODE_OPTIONS'));

describe('CLI hints print the command the way it was started', () => {
  const at = (argv1: string, env: NodeJS.ProcessEnv = {}, execArgv: string[] = []) =>
    commandPrefix({ argv: ['/usr/bin/node', argv1], env, execArgv, cwd: REPO_ROOT });

  it('npx / npm exec and npm scripts → npx actorloop', () => {
    expect(at('/home/u/.npm/_npx/abc/node_modules/.bin/actorloop', { npm_command: 'exec' })).toBe('npx actorloop');
    expect(at(join(REPO_ROOT, 'node_modules/.bin/actorloop'), { npm_command: 'run-script', npm_lifecycle_event: 'demo' })).toBe(
      'npx actorloop',
    );
  });

  it('a global install (actorloop on PATH is this program) → actorloop; a project .bin link not on PATH → npx actorloop', () => {
    const bin = join(dir.path, 'global-bin');
    mkdirSync(bin);
    const program = join(dir.path, 'main.js');
    writeFileSync(program, '');
    chmodSync(program, 0o755);
    symlinkSync(program, join(bin, 'actorloop'));
    expect(at(join(bin, 'actorloop'), { PATH: `/usr/bin:${bin}` })).toBe('actorloop');
    expect(at(join(bin, 'actorloop'), { PATH: '/usr/bin' })).toBe('npx actorloop');
  });

  it('node on a script → node with its options and the path from the working dir', () => {
    expect(at(join(REPO_ROOT, 'dist/cli/main.js'))).toBe('node dist/cli/main.js');
    expect(at(join(REPO_ROOT, 'src/cli/main.ts'), {}, ['--import', 'tsx'])).toBe('node --import tsx src/cli/main.ts');
    expect(at('/opt/my tools/main.js')).toBe("node '/opt/my tools/main.js'");
  });

  it("the library's own quoted commands (`actorloop repair DIR` in a store error) are rewritten to the same start", () => {
    setCommandPrefix('npx actorloop');
    try {
      expect(runnable('damaged pages; run `actorloop verify d` to see the extent and `actorloop repair d` to rebuild it')).toBe(
        'damaged pages; run `npx actorloop verify d` to see the extent and `npx actorloop repair d` to rebuild it',
      );
      expect(runnable(`run \`${command('repair d')}\``)).toBe('run `npx actorloop repair d`');
    } finally {
      setCommandPrefix('actorloop');
    }
    expect(runnable('run `actorloop repair d`')).toBe('run `actorloop repair d`');
  });

  it('the printed hint runs: an unknown session names a `sessions` command that, pasted into a shell, lists the sessions', async () => {
    const data = join(dir.path, 'data');
    await lmdbStore({ path: data }).close();
    const cli = (args: string[]) =>
      new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const p = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], { cwd: REPO_ROOT, env: plainEnv() });
        let out = '';
        let err = '';
        p.stdout.on('data', (d: Buffer) => (out += d.toString()));
        p.stderr.on('data', (d: Buffer) => (err += d.toString()));
        p.on('close', (code) => resolve({ code, out, err }));
      });
    const failed = await cli(['log', 'nosuch', '--data', data]);
    expect(failed.code).toBe(4);
    const hint = /`([^`]+ sessions [^`]+)` lists the sessions/.exec(failed.err)?.[1];
    expect(hint).toBe(`node --import tsx src/cli/main.ts sessions --data ${data}`);
    const listed = await promisify(execFile)('/bin/sh', ['-c', hint!], { cwd: REPO_ROOT, env: plainEnv() });
    expect(listed.stdout).toMatch(/no sessions/i);
  });
});
