import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { demoPaths } from '../../src/cli/demo-tools.js';
import { lmdbStore } from '../../src/index.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * The newcomer's promise, end to end: `actorloop demo` killed in the middle of its deploy, then
 * `actorloop demo --session` again, resumes the run, says what recovery found, and completes
 * without deploying twice.
 */
process.env.ACTORLOOP_DEMO_PACE = '0.5';
const demo = (data: string, label: string) =>
  spawnTs('src/cli/main.ts', ['demo', '--data', data, '--session', 's1', '--provider', 'scripted'], { label });

const dirs: ReturnType<typeof tempDir>[] = [];
afterEach(async () => {
  await killAllChildren();
  for (const d of dirs.splice(0)) await d.cleanup();
});

describe('actorloop demo as a process', () => {
  it('is killed (SIGKILL) while its deploy runs, and the next demo resumes the run to completion', async () => {
    const dir = tempDir('actorloop-demo-crash-');
    dirs.push(dir);
    const first = demo(dir.path, 'demo (killed mid-deploy)');
    await first.waitFor((l) => l.includes('tool start deploy c2_0 [exclusive]'), 30_000, 'the deploy to start');
    first.signal('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');
    expect(first.lines.some((l) => l.startsWith('outcome:'))).toBe(false);

    const second = demo(dir.path, 'demo (resumed)');
    const exit = await second.waitExit(60_000);
    expect(exit.code, second.describe()).toBe(0);
    const out = second.lines.join('\n');
    expect(out).toContain('recovery found: 1 interrupted run');
    expect(out).toMatch(/interrupted run r-\S+ \(turn 1, attempt a-\S+, run epoch 1\): its process stopped mid-run/);
    expect(out).toContain('tool call without a result: deploy c2_0 [exclusive] → reconcile');
    expect(out).toMatch(/continuing run r-\S+ with a new attempt/);
    expect(out).toContain('tool end   deploy c2_0 cancelled: interrupted before traffic was switched');
    expect(out).toContain('tool start deploy c3_0 [exclusive]');
    expect(out).toMatch(/^outcome: completed \(status succeeded/m);
    expect(out).toMatch(/^session: s1$/m);

    // the log: two attempts of one run; the killed deploy resolved by reconcile, never re-run
    const store = lmdbStore({ path: dir.path });
    const events = await collect(store.readEvents('s1'));
    await store.close();
    const starts = events.filter((e) => e.type === 'run/start').map((e) => e.payload.kind);
    expect(starts).toEqual(['prompt', 'continue']);
    const results = events
      .filter((e) => e.type === 'tool/result' && e.payload.name === 'deploy')
      .map((e) => [e.payload.callId, (e.payload.outcome as { kind: string }).kind]);
    expect(results).toEqual([
      ['c2_0', 'cancelled'],
      ['c3_0', 'completed'],
    ]);
    const { deployments } = demoPaths(dir.path);
    const statuses = readdirSync(deployments).map((f) => JSON.parse(readFileSync(join(deployments, f), 'utf8')).status as string);
    expect(statuses.sort()).toEqual(['done', 'started']); // one deploy took effect, once
  });

  it('prints the pid of the node process running it, so kill -9 of that pid stops the demo even when a wrapper (npx → sh → node) started it', async () => {
    const dir = tempDir('actorloop-demo-pid-');
    dirs.push(dir);
    // a shell that runs node as its child (as npx does), not exec'd in its place
    const wrapped = spawnTs('src/cli/main.ts', ['demo', '--data', dir.path, '--session', 'p1', '--provider', 'scripted'], {
      prefix: ['sh', '-c', '"$@"; exit $?', 'sh'],
      label: 'demo under sh',
    });
    const line = await wrapped.waitFor((l) => /^demo pid \d+/.test(l), 30_000, 'the demo pid line');
    const pid = Number(/^demo pid (\d+)/.exec(line)![1]);
    expect(line).toContain(`kill -9 ${pid}`);
    expect(pid).not.toBe(wrapped.proc.pid); // the wrapper's pid is not the demo's
    expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')).toEqual(expect.arrayContaining(['src/cli/main.ts', 'demo']));
    await wrapped.waitFor((l) => l.includes('tool start deploy'), 30_000, 'the deploy to start');
    process.kill(pid, 'SIGKILL');
    // the demo is gone: the wrapper reports its child killed (128 + 9) and no outcome was printed
    expect((await wrapped.waitExit(30_000)).code).toBe(137);
    expect(existsSync(`/proc/${pid}`)).toBe(false);
    expect(wrapped.lines.some((l) => l.startsWith('outcome:'))).toBe(false);
  });

  it('detaches on Ctrl-C (SIGINT), says how to resume, and exits 130', async () => {
    const dir = tempDir('actorloop-demo-int-');
    dirs.push(dir);
    const first = demo(dir.path, 'demo (Ctrl-C)');
    await first.waitFor((l) => l.includes('tool start deploy'), 30_000, 'the deploy to start');
    first.signal('SIGINT');
    const exit = await first.waitExit(30_000);
    expect(exit.code, first.describe()).toBe(130);
    const out = first.lines.join('\n');
    expect(out).toContain('Ctrl-C: detaching after the current step');
    expect(out).toMatch(/^outcome: incomplete \(status detached/m);
    // the hint is the command this demo was started with (npx under npm, else node … src/cli/main.ts)
    expect(out).toMatch(new RegExp(`^resume with: (npx actorloop|node .*src/cli/main\\.ts) demo --session s1 --data ${dir.path}$`, 'm'));
  });
});
