import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/program.js';
import { verifyAdvice } from '../../src/cli/store-commands.js';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { changeByte, readInChild, writeStore } from '../persistence/fixtures/damage.js';

/** `actorloop verify <dir>` and `actorloop repair <dir>` (docs/cli.md): report, exit codes, and the repaired log. */
const dir = tempDirs('actorloop-cli-verify-', killAllChildren);

async function cli(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const io = {
    out: { write: (s: string) => ((out += s), true) },
    err: { write: (s: string) => ((err += s), true) },
    onInterrupt: () => () => {},
  };
  const code = await runCli(['node', 'actorloop', ...args], { ...io, tty: false, env: {}, exitNow: () => {} });
  return { code, out, err };
}

describe('actorloop verify / repair', () => {
  it('verify exits 0 on a sound store, 3 naming session and seq on a damaged one, 4 without a data dir', async () => {
    const path = dir();
    await writeStore(path, { events: 10 });
    const sound = await cli('verify', path);
    expect([sound.code, sound.out]).toEqual([0, expect.stringMatching(/^ok: .*\(2 sessions, 20 events, \d+ journal frames\)/)]);
    changeByte(join(path, 'data.mdb'), 'a-7 x', 4, 'y');
    const damaged = await cli('verify', path);
    expect(damaged.code).toBe(3);
    expect(damaged.out).toMatch(/data\.mdb, session a, seq 7: record fails its checksum/);
    expect(damaged.out).toMatch(/actorloop repair/);
    const json = await cli('verify', path, '--json');
    expect(JSON.parse(json.out)).toMatchObject({ ok: false, problems: [{ where: 'data.mdb', sessionId: 'a', seq: 7 }] });
    expect((await cli('verify', join(path, 'nope'))).code).toBe(4);
  });

  it('verify advises repair only for damage: a check that could not run (a problem at verify) says so instead', () => {
    const couldNotRun = { ok: false as const, problems: [{ where: 'verify', reason: 'no room in the temp dir' }] };
    expect(verifyAdvice(couldNotRun, '/d')).toMatch(/could not finish, so nothing is known to be damaged/);
    expect(verifyAdvice(couldNotRun, '/d')).not.toMatch(/repair/);
    const damaged = { ok: false as const, problems: [...couldNotRun.problems, { where: 'data.mdb', sessionId: 'a', seq: 7, reason: 'x' }] };
    expect(verifyAdvice(damaged, '/d')).toMatch(/actorloop repair \/d/);
    const newer = { ok: false as const, problems: [...damaged.problems, { where: 'version', reason: 'a newer actorloop wrote it' }] };
    expect(verifyAdvice(newer, '/d')).toMatch(/upgrade actorloop.*do not repair/);
  });

  it('repair rebuilds the damaged data.mdb from the journal and exits 0; every event reads back', async () => {
    const path = dir();
    const expected = await writeStore(path, { events: 10 });
    changeByte(join(path, 'data.mdb'), 'b-3 x', 4, 'y');
    const r = await cli('repair', path);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/repair: moved the damaged data\.mdb aside[\s\S]*repair: rebuilt data\.mdb from the journal[\s\S]*ok: /);
    expect((await readInChild(path)).read).toEqual(expected);
    expect((await cli('repair', path)).out).toMatch(/nothing to repair/);
  });

  it('runs from the command line as its own process (the compiled-or-source child of verify included)', async () => {
    const path = dir();
    await writeStore(path, { events: 2 });
    const child = spawnTs('src/cli/main.ts', ['verify', path]);
    expect((await child.waitExit(60_000)).code, child.describe()).toBe(0);
    expect(child.lines[0]).toMatch(/^ok: /);
  });
});
