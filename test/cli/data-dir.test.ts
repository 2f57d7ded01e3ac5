import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/program.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { lmdbStore } from '../../src/index.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';
import { scaled } from '../helpers/load.js';

/**
 * The `actorloop` commands on a data dir: read-only commands leave it as it was, a damaged one is a
 * clear error, and several demos share one. Each test quotes the claim of README / docs/cli.md it
 * checks.
 */
const dir = tempDir('actorloop-data-dir-');
afterEach(async () => {
  await killAllChildren();
});
afterAll(async () => {
  await dir.cleanup();
});

const CLI = 'src/cli/main.ts';

/** The CLI as a process (node --import tsx src/cli/main.ts …). */
async function cli(args: string[]) {
  const child = spawnTs(CLI, args, { label: `actorloop ${args.join(' ')}` });
  const exit = await child.waitExit(30_000);
  return { code: exit.code, signal: exit.signal, out: child.lines.join('\n'), err: child.stderr, child };
}

/** runCli in this process, its output captured. */
async function cliHere(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; out: string; err: string }> {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (s: string) => ((err.text += s), true) };
  const code = await runCli(['node', 'actorloop', ...args], { out, err, onInterrupt: () => () => {}, tty: false, env, exitNow: () => {} });
  return { code, out: out.text, err: err.text };
}

const stateDraft = (n: number): EventDraft => ({
  turn: 0,
  step: 0,
  attempt: 0,
  type: 'state/updated',
  surfaceOp: 'none',
  payload: { stateContext: { n } },
});

/** docs/cli.md: "Errors are one line on stderr starting with `actorloop:`" — and no stack trace. */
function expectOneErrorLine(err: string): void {
  expect(err.trimEnd().split('\n'), err).toHaveLength(1);
  expect(err).toMatch(/^actorloop: /);
  expect(err).not.toMatch(/\n\s+at /);
}

describe('read-only commands leave the store as it was', () => {
  // docs/cli.md: `sessions` "Reads the per-session head records only"; `log`, `view`, `tail` print;
  // only `recover` and `demo` are documented to write (they attach a writer). A data dir written by
  // an app with lmdbStore({ durability: 'committed' }) (docs/event-log.md: "A path that has a
  // journal refuses 'committed'") is silently given a journal by `actorloop sessions`, after which
  // the app can no longer open its own store.
  it(
    "`actorloop sessions` on a store written with durability 'committed' does not give it a journal: the app can still open it",
    async () => {
      const path = join(dir.path, 'committed-app');
      const app = lmdbStore({ path, durability: 'committed' });
      const { writerEpoch } = await app.attachWriter('s1');
      await app.append('s1', writerEpoch, 1, [stateDraft(1)]);
      await app.close();

      const r = await cli(['sessions', '--data', path]);
      expect(r.code, r.child.describe()).toBe(0);
      expect(r.out).toContain('s1');

      expect(readdirSync(path).sort()).not.toContain('journal');
      const again = (() => {
        try {
          return lmdbStore({ path, durability: 'committed' });
        } catch (e) {
          return e as Error;
        }
      })();
      expect(again).not.toBeInstanceOf(Error);
      if (!(again instanceof Error)) await again.close();
    },
    scaled(60_000),
  );

  // the same, while the app is running: its next append is refused because a read-only
  // `actorloop sessions` (another process) adopted the path into the journaled mode.
  it(
    "`actorloop sessions` run while an app writes with durability 'committed' does not make the app's next append fail",
    async () => {
      const path = join(dir.path, 'committed-live');
      const app = lmdbStore({ path, durability: 'committed' });
      try {
        const { writerEpoch } = await app.attachWriter('s1');
        await app.append('s1', writerEpoch, 1, [stateDraft(1)]);

        const r = await cli(['sessions', '--data', path]);
        expect(r.code, r.child.describe()).toBe(0);

        await expect(app.append('s1', writerEpoch, 2, [stateDraft(2)])).resolves.toHaveLength(1);
      } finally {
        await app.close().catch(() => undefined);
      }
    },
    scaled(60_000),
  );
});

describe('a corrupt data dir is a clear error, not a crash', () => {
  // docs/cli.md: "3 | the log cannot be read: a corrupt record …"; "Errors are one line on stderr
  // starting with `actorloop:`". An LMDB file whose pages are damaged (zeroed past its two meta
  // pages) makes every read command print lmdb-js's MDB_CORRUPTED with a full stack trace, exit 1.
  it(
    '`actorloop sessions` / `log` on a damaged data.mdb print one `actorloop:` line (no stack trace) and exit 3',
    async () => {
      const path = join(dir.path, 'damaged');
      const store = lmdbStore({ path });
      const { writerEpoch } = await store.attachWriter('s1');
      await store.append(
        's1',
        writerEpoch,
        1,
        Array.from({ length: 50 }, (_, n) => stateDraft(n)),
      );
      await store.close();
      // keep the two meta pages, zero every page after them
      const file = join(path, 'data.mdb');
      const size = statSync(file).size;
      const fd = openSync(file, 'r+');
      writeSync(fd, Buffer.alloc(size - 8192), 0, size - 8192, 8192);
      closeSync(fd);

      for (const args of [['sessions'], ['log', 's1']]) {
        const r = await cli([...args, '--data', path]);
        expect(r.signal, r.child.describe()).toBeNull();
        // lmdb-js's native code may print its own diagnostic line to stderr first ("internal error,
        // index points to a 00 page!?"): out of our hands; ours is one line, and no stack trace
        expectOneErrorLine(
          r.err
            .split('\n')
            .filter((l) => !/^internal error/.test(l))
            .join('\n'),
        );
        expect(r.err).not.toMatch(/\n\s+at /);
        expect(r.code, r.child.describe()).toBe(3);
      }
    },
    scaled(60_000),
  );

  // A data dir whose data.mdb is not an LMDB file at all (a truncated copy, a wrong file): the
  // command dies of SIGSEGV inside lmdb-js (exit 139, nothing on stderr), after creating
  // journal.new/ and recovery/ in that folder.
  it(
    '`actorloop sessions` on a folder whose data.mdb is not an LMDB file exits with a message, not a segfault',
    async () => {
      const path = join(dir.path, 'not-lmdb');
      mkdirSync(path);
      writeFileSync(join(path, 'data.mdb'), 'this is not an LMDB environment\n'.repeat(200));
      const r = await cli(['sessions', '--data', path]);
      expect(r.signal, r.child.describe()).toBeNull();
      expect(r.code, r.child.describe()).not.toBe(0);
      expectOneErrorLine(r.err);
    },
    scaled(60_000),
  );

  // docs/cli.md: a `data.mdb` that is not an LMDB file "is reported in one line with exit 3, nothing
  // changed". `demo` and `web` made demo-sandbox/, demo-deployments/ and recovery/ in it first.
  it('`demo` and `web` on a folder whose data.mdb is not an LMDB file exit 3 naming the file, and add nothing to the folder', async () => {
    const path = join(dir.path, 'garbage');
    mkdirSync(path);
    writeFileSync(join(path, 'data.mdb'), 'garbage\n');
    for (const args of [
      ['demo', '--provider', 'scripted'],
      ['web', '--port', '0', '--provider', 'scripted'],
    ]) {
      const r = await cliHere([...args, '--data', path]);
      expectOneErrorLine(r.err);
      expect(r.err).toContain(`${path}/data.mdb is not an LMDB data file`);
      expect(r.code).toBe(3);
      expect(readdirSync(path)).toEqual(['data.mdb']);
    }
  });

  // A data.mdb cut short, without a journal to rebuild it from, was "corrupt log: session (store): …"
  it('a data file that cannot be read is named as the data dir\'s, not as a session called "(store)"', async () => {
    const path = join(dir.path, 'cut-short');
    const store = lmdbStore({ path, durability: 'committed' });
    const { writerEpoch } = await store.attachWriter('s1');
    await store.append(
      's1',
      writerEpoch,
      1,
      Array.from({ length: 200 }, (_, n) => stateDraft(n)),
    );
    await store.close();
    truncateSync(join(path, 'data.mdb'), 3 * 4096);
    const r = await cliHere(['sessions', '--data', path]);
    expectOneErrorLine(r.err);
    expect(r.err).not.toContain('(store)');
    expect(r.err).toMatch(new RegExp(`^actorloop: corrupt data dir: ${path}/data\\.mdb `));
    expect(r.code).toBe(3);
  });

  // docs/cli.md: "A corrupt record is named by session and seq; … the records before it are intact."
  // An unreadable head record is reported as "seq 0 … The records before seq 0 are intact", a
  // sentence about records that cannot exist.
  it('an unreadable head record is not reported as "the records before seq 0 are intact"', async () => {
    const path = join(dir.path, 'bad-head');
    const store = lmdbStore({ path });
    const { writerEpoch } = await store.attachWriter('s1');
    await store.append('s1', writerEpoch, 1, [stateDraft(1)]);
    await store.close();
    const { open } = await import('lmdb');
    const env = open({ path, maxDbs: 8 });
    env.openDB<string, string>({ name: 'heads', encoding: 'string' }).putSync('s1', '{"oops"');
    await env.close();

    const r = await cliHere(['sessions', '--data', path]);
    expect(r.code).toBe(3);
    expect(r.err).toMatch(/^actorloop: /);
    expect(r.err).not.toMatch(/before seq 0/);
  });
});

/** The CLI may be run as another user (uid 65534) only by root, with util-linux's setpriv. */
const AS_NOBODY = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'];
const canRunAsNobody = process.getuid?.() === 0 && spawnSync('setpriv', ['--version']).status === 0;

describe('a data dir this user may not open', () => {
  // docs/cli.md: "Errors are one line on stderr starting with `actorloop:`". A data dir this user
  // may read but not write (LMDB writes its lock file even to read) made every command print
  // lmdb-js's "Permission denied: Attempting to setup locks" with a stack trace, exit 1. Root
  // ignores file modes, so the commands run as uid 65534.
  it.skipIf(!canRunAsNobody)(
    'every command on a data dir this user may read but not write prints one line naming the dir and the cause, exit 4 (runs as uid 65534: needs root and setpriv)',
    async () => {
      const root = join(dir.path, 'read-only');
      const path = join(root, 'data');
      mkdirSync(root);
      const r = await cli(['demo', '--provider', 'scripted', '--data', path, '--session', 's1']);
      expect(r.code, r.child.describe()).toBe(0);
      // readable by everyone, writable by root only
      const open = (p: string) => {
        chmodSync(p, statSync(p).isDirectory() ? 0o755 : 0o644);
        if (statSync(p).isDirectory()) for (const f of readdirSync(p)) open(join(p, f));
      };
      chmodSync(dir.path, 0o755);
      open(root);
      for (const args of [
        ['sessions'],
        ['workers'],
        ['log', 's1'],
        ['recover', 's1'],
        ['view', 's1', '-o', join(root, 'v.html')],
        ['demo', '--session', 's1'],
      ]) {
        const child = spawnTs(CLI, [...args, '--data', path], { prefix: AS_NOBODY, label: `actorloop ${args.join(' ')} (as nobody)` });
        const exit = await child.waitExit(30_000);
        expectOneErrorLine(child.stderr);
        expect(child.stderr).toContain(`cannot open the data dir ${path}: permission denied`);
        expect(exit.code, child.describe()).toBe(4);
      }
    },
    scaled(120_000),
  );

  // docs/cli.md: "A data dir this user may read but not write is therefore refused in one line naming
  // it (`cannot open the data dir DIR: permission denied (…)`)". A dir this user may not even enter
  // (0700, another user's: as actorloop creates them) was "not an actorloop data dir (it has no data.mdb)".
  it.skipIf(!canRunAsNobody)(
    "a data dir this user may not enter (0700, another user's) is refused naming the dir and the cause, exit 4 (runs as uid 65534: needs root and setpriv)",
    async () => {
      const root = join(dir.path, 'private');
      const path = join(root, 'data');
      const store = lmdbStore({ path });
      const { writerEpoch } = await store.attachWriter('s1');
      await store.append('s1', writerEpoch, 1, [stateDraft(1)]);
      await store.close();
      chmodSync(dir.path, 0o755);
      chmodSync(root, 0o755);
      chmodSync(path, 0o700);
      for (const args of [
        ['sessions', '--data', path],
        ['log', 's1', '--data', path],
        ['verify', path],
        ['repair', path],
      ]) {
        const child = spawnTs(CLI, args, { prefix: AS_NOBODY, label: `actorloop ${args.join(' ')} (as nobody)` });
        const exit = await child.waitExit(30_000);
        expectOneErrorLine(child.stderr);
        expect(child.stderr).toContain(`cannot open the data dir ${path}: permission denied`);
        expect(exit.code, child.describe()).toBe(4);
      }
    },
    scaled(60_000),
  );

  // docs/cli.md: a file is "a folder that is not a data dir" (exit 4); `demo -d FILE` printed a raw
  // `ENOTDIR: not a directory, mkdir …`, exit 1
  it('`actorloop demo --data <a regular file>` prints one line saying it is not a data dir, exit 4', async () => {
    const file = join(dir.path, 'a-file');
    writeFileSync(file, 'notes\n');
    const r = await cliHere(['demo', '--provider', 'scripted', '--data', file]);
    expectOneErrorLine(r.err);
    expect(r.err).toContain(`${file} is not an actorloop data dir (it is a file, not a directory)`);
    expect(r.code).toBe(4);
  });
});

describe('several demos in one data dir', () => {
  // docs/cli.md: "A new session (no `--session` …): the session id defaults to
  // `demo-<yyyymmdd-hhmmss>`"; "Several processes may open one data dir at once". Two demos
  // started in the same second both pick the same new id (the `-2` suffix check races the
  // attach), so they fence each other: one ends `incomplete (status fenced)`, and a demo fenced
  // while it opens dies with a StaleWriterError stack trace.
  it(
    'two demos started together without --session each get their own new session and complete',
    async () => {
      const data = join(dir.path, 'together');
      const env = { ACTORLOOP_DEMO_PACE: '0.05' };
      const [a, b] = await Promise.all([
        cliHere(['demo', '--provider', 'scripted', '--data', data], env),
        cliHere(['demo', '--provider', 'scripted', '--data', data], env),
      ]);
      const idA = /^session: (.+)$/m.exec(a.out)?.[1];
      const idB = /^session: (.+)$/m.exec(b.out)?.[1];
      expect(idA).not.toBe(idB);
      expect([a.code, b.code], `${a.out}\n${a.err}\n---\n${b.out}\n${b.err}`).toEqual([0, 0]);
      expect(existsSync(data)).toBe(true);
    },
    scaled(60_000),
  );

  // docs/cli.md: "Errors are one line on stderr starting with `actorloop:`": a demo refused because
  // another live process runs its session printed "cannot run: …" on stdout, without the prefix
  it(
    'a demo refused because another live process runs its session says so in one line on stderr, exit 1',
    async () => {
      const data = join(dir.path, 'held');
      const live = spawnTs(CLI, ['demo', '--provider', 'scripted', '--data', data, '--session', 'held'], { label: 'demo (live)' });
      await live.waitFor((l) => l.includes('tool start deploy'), 30_000, 'the deploy to start');
      const r = await cliHere(['demo', '--provider', 'scripted', '--data', data, '--session', 'held'], { ACTORLOOP_DEMO_PACE: '0.05' });
      expectOneErrorLine(r.err);
      expect(r.err).toContain(`actorloop: cannot run: session held is being run by another live process (pid ${live.proc.pid} on `);
      expect(r.out).not.toContain('cannot run');
      expect(r.code).toBe(1);
    },
    scaled(60_000),
  );

  // docs/cli.md: "a session has at most one live writer, the last to attach"; "Errors are one line
  // on stderr starting with `actorloop:`". Two demos resumed on the same --session at once: one is
  // fenced (expected), but a demo fenced while opening the session dies with a StaleWriterError
  // stack trace instead of the demo's own "outcome: incomplete … resume with: …" report.
  it(
    'a demo fenced by another demo of the same session while it opens reports it without a stack trace',
    async () => {
      const data = join(dir.path, 'same-session');
      const env = { ACTORLOOP_DEMO_PACE: '0.05' };
      const args = ['demo', '--provider', 'scripted', '--data', data, '--session', 'shared'];
      const runs = await Promise.all([cliHere(args, env), cliHere(args, env), cliHere(args, env)]);
      for (const r of runs) expect(r.err, `${r.out}\n${r.err}`).not.toMatch(/\n\s+at /);
      expect(runs.map((r) => r.code)).toContain(0);
    },
    scaled(60_000),
  );
});
