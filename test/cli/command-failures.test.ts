import { spawn } from 'node:child_process';
import { open } from 'lmdb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionsCommand, type CommandIO } from '../../src/cli/commands.js';
import { recoverCommand } from '../../src/cli/recover-command.js';
import { describeFailure } from '../../src/cli/errors.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { lmdbStore } from '../../src/index.js';
import { REPO_ROOT } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';
import { scaled } from '../helpers/load.js';

let dir: ReturnType<typeof tempDir>;
const at = (turn: number, step: number) => ({ turn, step, attempt: turn ? 1 : 0 });

function capture(): CommandIO & { out: { text: string }; err: { text: string } } {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (s: string) => ((err.text += s), true) };
  return { out, err, onInterrupt: () => () => {} };
}

beforeAll(async () => {
  dir = tempDir('actorloop-cli-failures-');
  const store = lmdbStore({ path: dir.path });
  // a long session (≈ 400 KB of `log` output: more than a pipe buffer holds)
  {
    const { writerEpoch } = await store.attachWriter('long');
    const drafts: EventDraft[] = Array.from({ length: 3000 }, (_, n) => ({
      ...at(0, 0),
      type: 'state/updated',
      surfaceOp: 'none',
      payload: { stateContext: { n, pad: 'p'.repeat(60) } },
    }));
    await store.append('long', writerEpoch, 1, drafts);
  }
  // a session whose seq 3 is corrupt
  {
    const { writerEpoch } = await store.attachWriter('victim');
    await store.append('victim', writerEpoch, 1, [
      { ...at(0, 0), type: 'session/attached', surfaceOp: 'none', payload: { sessionInstanceId: 'i1', writerEpoch } },
      {
        ...at(1, 0),
        type: 'run/start',
        surfaceOp: 'none',
        payload: { runId: 'r1', attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f'.repeat(64) },
      },
      { ...at(1, 0), type: 'user/message', surfaceOp: 'append', payload: { message: { role: 'user', content: 'deploy it' } } },
    ]);
  }
  await store.close();
  const env = open({ path: dir.path, maxDbs: 8 });
  env.openDB<string, [string, number]>({ name: 'events', encoding: 'string' }).putSync(['victim', 3], '{"not": a record');
  await env.close();
});
afterAll(async () => {
  await dir.cleanup();
});

describe('command failures', () => {
  it(
    '`actorloop log` piped into a reader that stops early (| head) ends quietly, without an unhandled EPIPE stack trace',
    async () => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'log', 'long', '--data', dir.path], {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, NODE_OPTIONS: '' },
      });
      let stderr = '';
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      // like `| head -1`: read the first chunk, then close the pipe
      child.stdout.once('data', () => child.stdout.destroy());
      const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
      // docs/cli.md: "Errors are one line on stderr starting with `actorloop:`"
      expect(stderr).not.toMatch(/Unhandled 'error' event|EPIPE\n\s+at /);
      expect(stderr.trim() === '' || /^actorloop: [^\n]*$/.test(stderr.trim())).toBe(true);
      expect(code).not.toBeNull();
    },
    scaled(60_000),
  );

  it('`actorloop recover` on a corrupt log exits 3 and changes nothing on disk (the writer epoch stays)', async () => {
    const epoch = async () => {
      const io = capture();
      await sessionsCommand({ data: dir.path, json: true }, io);
      return (JSON.parse(io.out.text) as { sessionId: string; writerEpoch: number }[]).find((r) => r.sessionId === 'victim')!.writerEpoch;
    };
    const before = await epoch();
    const io = capture();
    const failure = await recoverCommand('victim', { data: dir.path }, io).then(
      (code) => ({ exitCode: code, message: '' }),
      (e: unknown) => describeFailure(e),
    );
    expect(failure).toMatchObject({ exitCode: 3, message: expect.stringContaining('nothing was changed') });
    // the message says nothing was changed, but opening attached a writer first: epoch + 1 (and any live writer fenced)
    expect(await epoch()).toBe(before);
  });
});
