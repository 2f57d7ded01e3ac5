import { afterEach, describe, expect, it } from 'vitest';
import type { CommandIO } from '../../src/cli/commands.js';
import { recoverCommand } from '../../src/cli/recover-command.js';
import { runCli } from '../../src/cli/program.js';
import { liveLeaseOf } from '../../src/cli/session-lease.js';
import { RecoveryOutcome } from '../../src/contracts/requests.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { createRuntime, lmdbStore, memoryStore, scriptedModel } from '../../src/index.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { runAgentTree } from '../helpers/agent-tree.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

/** `actorloop recover` (docs/cli.md): read only by default; `--resume` takes the session over, and says it fences. */
process.env.ACTORLOOP_DEMO_PACE = '0.5';
const demo = (data: string, label: string) =>
  spawnTs('src/cli/main.ts', ['demo', '--data', data, '--session', 's1', '--provider', 'scripted'], { label });

function capture(): CommandIO & { out: { text: string }; err: { text: string } } {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (s: string) => ((err.text += s), true) };
  return { out, err, onInterrupt: () => () => {} };
}

const attaches = async (path: string) => {
  const store = lmdbStore({ path });
  try {
    return (await collect(store.readEvents('s1'))).filter((e) => e.type === 'session/attached').length;
  } finally {
    await store.close();
  }
};

const dirs: ReturnType<typeof tempDir>[] = [];
afterEach(async () => {
  await killAllChildren();
  for (const d of dirs.splice(0)) await d.cleanup();
});

describe('actorloop recover', () => {
  it('by default reads the log and fences no one: a demo running the session (paused mid-deploy meanwhile) completes', async () => {
    const dir = tempDir('actorloop-recover-live-');
    dirs.push(dir);
    const live = demo(dir.path, 'demo (live)');
    await live.waitFor((l) => l.includes('tool start deploy c2_0 [exclusive]'), 30_000, 'the deploy to start');
    live.signal('SIGSTOP'); // the run is certainly in flight while recover reads
    const io = capture();
    try {
      expect(await recoverCommand('s1', { data: dir.path }, io)).toBe(0);
    } finally {
      live.signal('SIGCONT');
    }
    const preview = JSON.parse(io.out.text) as RecoveryOutcome & { readOnly: boolean };
    expect(preview.readOnly).toBe(true);
    expect(RecoveryOutcome.parse(preview).writerEpoch).toBe(1); // the live writer's epoch, not a new one
    expect(preview.interruptedRuns).toHaveLength(1);
    expect(preview.uncertainToolCalls).toEqual([expect.objectContaining({ callId: 'c2_0', name: 'deploy', resolution: 'reconcile' })]);
    expect(io.err.text).toContain('recovery would find: 1 interrupted run');
    // the run goes on in the demo's process: the preview says who holds it, not that its process stopped
    expect(io.err.text).not.toContain('its process stopped mid-run');
    expect(io.err.text).toMatch(new RegExp(`: running now in the live process pid ${live.proc.pid} on \\S+, not stopped`));
    expect(io.err.text).toMatch(
      new RegExp(
        `session s1 is held by the live process pid ${live.proc.pid} on \\S+: .*demo --session s1.* is refused while it runs, .*--resume. fences it`,
      ),
    );
    expect(io.err.text).toMatch(
      /read only: nothing was attached or written\. To take the session over and settle it: .*recover s1 --data \S+ --resume \(fences a process still running it\)/,
    );

    const exit = await live.waitExit(60_000);
    expect(exit.code, live.describe()).toBe(0);
    expect(live.lines.join('\n')).toMatch(/^outcome: completed \(status succeeded/m);
    expect(await attaches(dir.path)).toBe(1);
  });

  it('--resume says it fences a live process, and does: the running demo ends fenced', async () => {
    const dir = tempDir('actorloop-recover-resume-');
    dirs.push(dir);
    const live = demo(dir.path, 'demo (to be fenced)');
    await live.waitFor((l) => l.includes('tool start deploy c2_0 [exclusive]'), 30_000, 'the deploy to start');
    const io = capture();
    const code = await runCli(['node', 'actorloop', 'recover', 's1', '--data', dir.path, '--resume'], {
      ...io,
      tty: false,
      env: {},
      exitNow: () => {},
    });
    expect(code, io.err.text).toBe(0);
    expect(io.err.text).toContain('resumed: attached a new writer to session s1 (writer epoch 2); a process still running it is fenced');
    expect(RecoveryOutcome.parse(JSON.parse(io.out.text)).writerEpoch).toBe(2);
    const exit = await live.waitExit(60_000);
    expect(exit.code, live.describe()).toBe(1);
    expect(live.lines.join('\n')).toMatch(/^outcome: incomplete \(status fenced/m);
    expect(await attaches(dir.path)).toBe(2);
  });

  it('--force without --resume is a usage error', async () => {
    const io = capture();
    expect(await runCli(['node', 'actorloop', 'recover', 's1', '--force'], { ...io, tty: false, env: {}, exitNow: () => {} })).toBe(2);
    expect(io.err.text).toContain('--force only goes with --resume');
  });

  it("--resume refuses while a serving worker's unexpired lease holds the session (the store's leases, runtime.serve); --force resumes", async (ctx) => {
    const dir = tempDir('actorloop-recover-lease-');
    dirs.push(dir);
    /** The lease calls of a store's `work` (src/persistence/work-store.ts, with runtime.serve). */
    type Work = {
      submit(sessionId: string, entry: { kind: 'cancel'; entryId: string }): Promise<unknown>;
      claim(workerId: string, options: { limit: number; leaseMs: number }): Promise<{ sessionId: string }[]>;
    };
    const store = lmdbStore({ path: dir.path }) as ReturnType<typeof lmdbStore> & { work?: Work };
    const work = store.work;
    if (!work) {
      await store.close();
      ctx.skip('this store keeps no leases (runtime.serve is not part of this build)');
      return;
    }
    const { writerEpoch } = await store.attachWriter('s1');
    await store.append('s1', writerEpoch, 1, [
      { turn: 0, step: 0, attempt: 0, type: 'session/attached', surfaceOp: 'none', payload: { sessionInstanceId: 'i1', writerEpoch } },
    ]);
    await work.submit('s1', { kind: 'cancel', entryId: 'c1' });
    expect(await work.claim('w1', { limit: 1, leaseMs: 600_000 })).toEqual([expect.objectContaining({ sessionId: 's1' })]);
    await store.close();

    const refused = capture();
    const code = await runCli(['node', 'actorloop', 'recover', 's1', '--data', dir.path, '--resume'], {
      ...refused,
      tty: false,
      env: {},
      exitNow: () => {},
    });
    expect(code).toBe(1);
    expect(refused.err.text).toMatch(
      /session s1 is held by serving worker w1 \(lease until .+\); resuming would fence it mid-run\. .*--force/,
    );
    expect(await attaches(dir.path)).toBe(1);

    // the preview names the worker's lease, and what --resume would do
    const preview = capture();
    expect(await recoverCommand('s1', { data: dir.path }, preview)).toBe(0);
    expect(preview.err.text).toMatch(
      /session s1 is held by serving worker w1 under a lease until \S+: .*--resume.* refuses while it lasts/,
    );
    expect(await attaches(dir.path)).toBe(1);

    const forced = capture();
    expect(
      await runCli(['node', 'actorloop', 'recover', 's1', '--data', dir.path, '--resume', '--force'], {
        ...forced,
        tty: false,
        env: {},
        exitNow: () => {},
      }),
    ).toBe(0);
    expect(await attaches(dir.path)).toBe(2);
  });

  it("a serving worker's unexpired lease is found through the store's lease list; an expired one or none is not", async () => {
    const store = memoryStore();
    expect(await liveLeaseOf(store, 's1')).toBeUndefined(); // a store without leases
    const lease = (sessionId: string, expired: boolean) => ({
      sessionId,
      workerId: 'w1',
      writerEpoch: 3,
      leaseUntil: '2026-12-02T01:00:00.000Z',
      expired,
    });
    const leased = Object.assign(Object.create(store) as typeof store, {
      work: { listLeases: async () => [lease('s1', false), lease('s2', true)] },
    });
    expect(await liveLeaseOf(leased, 's1')).toMatchObject({ workerId: 'w1' });
    expect(await liveLeaseOf(leased, 's2')).toBeUndefined();
    expect(await liveLeaseOf(leased, 's3')).toBeUndefined();
    await store.close();
  });
});

describe('the recover summary', () => {
  // docs/cli.md: the JSON's `undeliveredFinalIds` lists final answers committed without a delivery
  // record, with "a readable summary"; the summary named only delivered and unknown ones
  it('names a final answer committed but never delivered (the process died before its delivery)', async () => {
    const dir = tempDir('actorloop-recover-undelivered-');
    dirs.push(dir);
    const runtime = createRuntime({
      store: lmdbStore({ path: dir.path }),
      model: scriptedModel(['the answer is 42']),
      delivery: { idempotent: true, deliver: async () => {} },
    });
    await (await runtime.openSession('done')).execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'q' });
    await runtime.close();
    // the same log cut where a SIGKILL between final/message and delivery/committed leaves it
    const store = lmdbStore({ path: dir.path });
    const events = await collect(store.readEvents('done'));
    const cut = events.slice(
      0,
      events.findIndex((e) => e.type === 'delivery/committed'),
    );
    const { writerEpoch } = await store.attachWriter('died');
    await store.append(
      'died',
      writerEpoch,
      1,
      cut.map(({ turn, step, attempt, type, surfaceOp, payload }) => ({ turn, step, attempt, type, surfaceOp, payload }) as EventDraft),
    );
    await store.close();
    const finalId = (cut.find((e) => e.type === 'final/message')!.payload as { finalMessageId: string }).finalMessageId;

    const io = capture();
    expect(await recoverCommand('died', { data: dir.path }, io)).toBe(0);
    expect((JSON.parse(io.out.text) as { undeliveredFinalIds: string[] }).undeliveredFinalIds).toEqual([finalId]);
    expect(io.err.text).toContain(`final answers committed, not delivered: ${finalId} (opening delivers them again`);
  });
});

describe('actorloop recover on agent calls and child sessions', () => {
  const at = (turn: number, step: number) => ({ turn, step, attempt: 1 });
  const run = (runId: string, extra: Record<string, unknown> = {}) => ({
    ...at(1, 0),
    type: 'run/start' as const,
    surfaceOp: 'none' as const,
    payload: { runId, attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f'.repeat(64), ...extra },
  });
  /** `s` (a finished tree: child s/r/1/c1, grandchild s/r/1/c1/answer/1/k1); `p`, whose process stopped during agent call c1; `agented`, run by agent `researcher`. */
  async function fixture(path: string): Promise<void> {
    await (await runAgentTree(lmdbStore({ path })))();
    const store = lmdbStore({ path });
    for (const id of ['p', 'agented']) {
      const { writerEpoch } = await store.attachWriter(id);
      const attached = {
        turn: 0,
        step: 0,
        attempt: 0,
        type: 'session/attached' as const,
        surfaceOp: 'none' as const,
        payload: { sessionInstanceId: 'i1', writerEpoch },
      };
      if (id === 'agented') {
        await store.append(id, writerEpoch, 1, [attached, run('r1', { agent: 'researcher' })]);
        continue;
      }
      await store.append(id, writerEpoch, 1, [
        attached,
        run('r1'),
        { ...at(1, 0), type: 'user/message', surfaceOp: 'append', payload: { message: { role: 'user', content: 'ask' } } },
        { ...at(1, 1), type: 'step/start', surfaceOp: 'none', payload: {} },
        {
          ...at(1, 1),
          type: 'tool/call',
          surfaceOp: 'none',
          payload: {
            callId: 'c1',
            name: 'researcher',
            arguments: { input: 'tea?' },
            rawArguments: '{"input":"tea?"}',
            mode: 'parallel',
            resources: [],
            idempotencyKey: 'r1/1/c1',
            resumable: true,
          },
        },
      ]);
    }
    await store.close();
  }
  const cliHere = async (args: string[]) => {
    const io = capture();
    const code = await runCli(['node', 'actorloop', ...args], {
      ...io,
      tty: false,
      env: { ACTORLOOP_DEMO_PACE: '0.05' },
      exitNow: () => {},
    });
    return { code, out: io.out.text, err: io.err.text };
  };
  const epochOf = async (path: string, id: string) => {
    const store = lmdbStore({ path });
    try {
      return (await store.getHead(id))?.writerEpoch;
    } finally {
      await store.close();
    }
  };

  // docs/agents.md: "An agent call is never reported uncertain … it is not in recovery.uncertainToolCalls"
  it('the preview reports an interrupted agent call as resumed (its child run goes on), never uncertain', async () => {
    const dir = tempDir('actorloop-recover-agent-call-');
    dirs.push(dir);
    await fixture(dir.path);
    const r = await cliHere(['recover', 'p', '--data', dir.path]);
    expect(r.code, r.err).toBe(0);
    const preview = JSON.parse(r.out) as { uncertainToolCalls: unknown[]; resumedAgentCalls: unknown[] };
    expect(preview.uncertainToolCalls).toEqual([]);
    expect(preview.resumedAgentCalls).toEqual([{ callId: 'c1', name: 'researcher', childSessionId: 'p/r1/1/c1' }]);
    expect(r.err).not.toContain('uncertain');
    expect(r.err).toContain(
      'agent call without a result: researcher c1 → resumed (agent call: its child run goes on in session p/r1/1/c1)',
    );
  });

  // docs/cli.md: hints run as printed; the preview of a child session offered its own `--resume`, which is refused
  it("the preview of a child session offers its root's --resume, never its own", async () => {
    const dir = tempDir('actorloop-recover-child-hint-');
    dirs.push(dir);
    await fixture(dir.path);
    const r = await cliHere(['recover', 's/r/1/c1', '--data', dir.path]);
    expect(r.code, r.err).toBe(0);
    expect(r.err).not.toMatch(/recover s\/r\/1\/c1 .*--resume/);
    expect(r.err).toMatch(
      /a child session is resumed through its root session s: to take it over, \S*\s?actorloop recover s --data \S+ --resume/,
    );
  });

  // docs/cli.md: "Errors are one line on stderr starting with `actorloop:`"; a child session id gave
  // an UnknownAgentError stack trace
  it('a child session is resumed through its root: recover --resume and demo --session on its id say so in one line naming the root, exit 2, and write nothing', async () => {
    const dir = tempDir('actorloop-recover-child-');
    dirs.push(dir);
    await fixture(dir.path);
    for (const [id, parent] of [
      ['s/r/1/c1', 's'],
      ['s/r/1/c1/answer/1/k1', 's/r/1/c1'],
    ] as const) {
      const before = await epochOf(dir.path, id);
      for (const args of [
        ['recover', id, '--data', dir.path, '--resume'],
        ['demo', '--provider', 'scripted', '--session', id, '--data', dir.path],
      ]) {
        const r = await cliHere(args);
        expect(r.err.trimEnd().split('\n'), r.err).toHaveLength(1);
        expect(r.err).toMatch(
          new RegExp(
            `^actorloop: session ${id} is a child session \\(agent call \\w+ of session ${parent}\\): it is resumed through its root session s,`,
          ),
        );
        expect(r.err).toMatch(/`.*recover s --data \S+` shows what that would find/);
        expect(r.code).toBe(2);
      }
      expect(await epochOf(dir.path, id)).toBe(before);
    }
  });

  // docs/cli.md: `--resume` says it attached a writer once it has; it said so before an open that then failed
  it("a session run by an agent the CLI does not define is one line naming the agent, without the error's stack, and no word of a writer attached", async () => {
    const dir = tempDir('actorloop-recover-agent-');
    dirs.push(dir);
    await fixture(dir.path);
    const r = await cliHere(['recover', 'agented', '--data', dir.path, '--resume']);
    const lines = r.err.trimEnd().split('\n');
    expect(lines).toEqual([
      expect.stringMatching(
        /^actorloop: session agented: no agent named "researcher" in this runtime .*: the CLI defines only the demo agent/,
      ),
    ]);
    expect(r.code).toBe(1);
  });
});
