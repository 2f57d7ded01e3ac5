import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { open } from 'lmdb';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { logCommand, sessionsCommand, viewCommand, type CommandIO } from '../../src/cli/commands.js';
import { recoverCommand } from '../../src/cli/recover-command.js';
import { describeFailure } from '../../src/cli/errors.js';
import { command } from '../../src/cli/invocation.js';
import { verifyCommand } from '../../src/cli/store-commands.js';
import { runCli } from '../../src/cli/program.js';
import type { EventDraft } from '../../src/contracts/events.js';
import { RecoveryOutcome } from '../../src/contracts/requests.js';
import { createRuntime, defineTool, lmdbStore, scriptedModel } from '../../src/index.js';
import { killAllChildren, spawnTs, type ChildRun } from '../crash/child-util.js';
import { runAgentTree } from '../helpers/agent-tree.js';
import { tempDir } from '../helpers/tmp.js';
import { z } from 'zod';

const CLI = 'src/cli/main.ts';
let dir: ReturnType<typeof tempDir>;

function capture(): CommandIO & { out: { text: string }; err: { text: string } } {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (s: string) => ((err.text += s), true) };
  return { out, err, onInterrupt: () => () => {} };
}

async function cli(args: string[]): Promise<{ code: number | null; out: string; err: string; child: ChildRun }> {
  const child = spawnTs(CLI, args, { label: `actorloop ${args.join(' ')}` });
  const exit = await child.waitExit(30_000);
  return { code: exit.code, out: child.lines.join('\n'), err: child.stderr, child };
}

const at = (turn: number, step: number) => ({ turn, step, attempt: turn ? 1 : 0 });
/** A run whose process stopped while an exclusive deploy ran: intent logged, no result, no run/end. */
const interruptedRun: EventDraft[] = [
  {
    ...at(1, 0),
    type: 'run/start',
    surfaceOp: 'none',
    payload: { runId: 'r1', attemptId: 'a1', runEpoch: 1, kind: 'prompt', executionProfileFingerprint: 'f'.repeat(64) },
  },
  { ...at(1, 0), type: 'user/message', surfaceOp: 'append', payload: { message: { role: 'user', content: 'deploy it' } } },
  { ...at(1, 1), type: 'step/start', surfaceOp: 'none', payload: {} },
  {
    ...at(1, 1),
    type: 'assistant/message',
    surfaceOp: 'append',
    payload: {
      message: { role: 'assistant', content: '', toolCalls: [{ id: 'd1', name: 'deploy', arguments: '{}' }] },
      finishReason: 'tool_calls',
      latencyMs: 5,
    },
  },
  {
    ...at(1, 1),
    type: 'tool/call',
    surfaceOp: 'none',
    payload: {
      callId: 'd1',
      name: 'deploy',
      arguments: { service: 'checkout', version: '2.4.0', environment: 'staging' },
      mode: 'exclusive',
      resources: ['env:staging'],
      idempotencyKey: 'crashed/r1/d1',
    },
  },
];

beforeAll(async () => {
  dir = tempDir('actorloop-cli-');
  // a finished session, made by the runtime
  const add = defineTool({
    name: 'add',
    description: 'adds',
    parameters: z.object({ a: z.number(), b: z.number() }),
    mode: 'parallel',
    execute: ({ a, b }) => String(a + b),
  });
  const runtime = createRuntime({
    store: lmdbStore({ path: dir.path }),
    model: scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 1, b: 2 } }] }, 'It is 3.']),
    tools: [add],
  });
  const s = await runtime.openSession('done');
  await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'add 1 and 2' });
  await runtime.close();
  // an interrupted session and one to corrupt, written straight through the store
  const store = lmdbStore({ path: dir.path });
  for (const id of ['crashed', 'victim']) {
    const { writerEpoch } = await store.attachWriter(id);
    await store.append(id, writerEpoch, 1, [
      { ...at(0, 0), type: 'session/attached', surfaceOp: 'none', payload: { sessionInstanceId: 'i1', writerEpoch } },
      ...interruptedRun,
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
afterEach(async () => {
  await killAllChildren();
});

describe('the read commands, in process', () => {
  it('lists sessions with their state', async () => {
    const io = capture();
    expect(await sessionsCommand({ data: dir.path }, io)).toBe(0);
    expect(io.out.text).toMatch(/^crashed\s+6\s+1\s+1\s+open run r1 \(resumable\)$/m);
    expect(io.out.text).toMatch(/^done\s+\d+\s+1\s+1\s+idle$/m);
    const json = capture();
    await sessionsCommand({ data: dir.path, json: true }, json);
    expect(
      JSON.parse(json.out.text)
        .map((r: { sessionId: string }) => r.sessionId)
        .sort(),
    ).toEqual(['crashed', 'done', 'victim']);
  });

  it('prints the log as lines or JSON, from a seq', async () => {
    const io = capture();
    expect(await logCommand('done', { data: dir.path }, io)).toBe(0);
    const lines = io.out.text.trim().split('\n');
    expect(lines[0]).toMatch(/^\s*1\s+\S+\s+session\/attached\s+writer epoch 1/);
    expect(io.out.text).toMatch(/tool\/result\s+add \S+ completed: 3/);
    expect(lines.at(-1)).toMatch(/run\/end\s+run r1 succeeded → completed$/);
    const json = capture();
    await logCommand('done', { data: dir.path, from: '3', json: true }, json);
    const records = json.out.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(records[0].seq).toBe(3);
    expect(records).toHaveLength(lines.length - 2);
  });

  it('recover (read only) prints what recovery would find as JSON, attaching nothing', async () => {
    const io = capture();
    expect(await recoverCommand('crashed', { data: dir.path }, io)).toBe(0);
    const r = RecoveryOutcome.parse(JSON.parse(io.out.text));
    expect(r.writerEpoch).toBe(1);
    expect(r.uncertainToolCalls).toEqual([
      expect.objectContaining({ callId: 'd1', name: 'deploy', mode: 'exclusive', resolution: 'reconcile' }),
    ]);
    expect(io.err.text).toContain('recovery would find: 1 interrupted run');
    const again = capture();
    await recoverCommand('crashed', { data: dir.path }, again);
    expect(again.out.text).toBe(io.out.text);
  });

  it('recover --resume attaches a writer and prints the RecoveryOutcome as JSON', async () => {
    const io = capture();
    expect(await recoverCommand('crashed', { data: dir.path, resume: true }, io)).toBe(0);
    const r = RecoveryOutcome.parse(JSON.parse(io.out.text));
    expect(r.writerEpoch).toBe(2);
    expect(r.interruptedRuns.map((x) => x.runId)).toEqual(['r1']);
    expect(r.uncertainToolCalls).toEqual([
      expect.objectContaining({ callId: 'd1', name: 'deploy', mode: 'exclusive', resolution: 'reconcile' }),
    ]);
    expect(io.err.text).toContain('recovery found: 1 interrupted run');
    expect(io.err.text).toContain('tool call without a result: deploy d1 [exclusive] → reconcile');
  });

  it('view writes one self-contained HTML file', async () => {
    const io = capture();
    const file = join(dir.path, 'done.html');
    expect(await viewCommand('done', { data: dir.path, output: file }, io)).toBe(0);
    const html = readFileSync(file, 'utf8');
    expect(html).toMatch(/^<!doctype html>/);
    expect(html.match(/<g class="bar tool [^"]*" data-seqs=/g)).toHaveLength(1);
    expect(io.out.text).toContain(`wrote ${file}`);
  });

  it("log, view and verify work on an agent call's child session by its id; the parent's view draws its children", async () => {
    const tree = tempDir('actorloop-cli-tree-');
    try {
      await (await runAgentTree(lmdbStore({ path: tree.path })))();
      const log = capture();
      expect(await logCommand('s/r/1/c1', { data: tree.path }, log)).toBe(0);
      expect(log.out.text).toMatch(/session\/attached/);
      expect(log.out.text.trim().split('\n').at(-1)).toMatch(/run\/end\s+run answer succeeded/);
      const parent = capture();
      const file = join(tree.path, 'parent.html');
      expect(await viewCommand('s', { data: tree.path, output: file }, parent)).toBe(0);
      expect(parent.out.text).toContain('2 child sessions drawn under their calls');
      expect(readFileSync(file, 'utf8')).toContain('>↳ k1</text>');
      // docs/cli.md: a hint runs as printed: the child's own page is drawn by a command naming the data dir
      expect(readFileSync(file, 'utf8')).toContain(`<code>${command(`view s/r/1/c1 --data ${tree.path}`)}</code>`);
      const child = capture();
      const childFile = join(tree.path, 'child.html');
      expect(await viewCommand('s/r/1/c1', { data: tree.path, output: childFile }, child)).toBe(0);
      expect(child.out.text).toContain('1 child session drawn under its call');
      expect(readFileSync(childFile, 'utf8')).toContain('actorloop session <code>s/r/1/c1</code>');
      const verify = capture();
      expect(await verifyCommand(tree.path, { json: true }, verify)).toBe(0);
      expect(JSON.parse(verify.out.text)).toMatchObject({ ok: true, checked: { sessions: 3 } });
    } finally {
      await tree.cleanup();
    }
  });

  it('names a corrupt record by session and seq, with exit code 3', async () => {
    const io = capture();
    const failure = await logCommand('victim', { data: dir.path }, io).catch((e) => describeFailure(e));
    expect(failure).toMatchObject({
      exitCode: 3,
      message: expect.stringMatching(/^corrupt log: session victim, seq 3: undecodable record/),
    });
    // the intact records before it are printed first
    expect(
      io.out.text
        .trim()
        .split('\n')
        .map((l) => l.trim().split(/\s+/)[0]),
    ).toEqual(['1', '2']);
  });
});

/** runCli in this process, its output captured. */
async function cliHere(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const io = capture();
  const code = await runCli(['node', 'actorloop', ...args], { ...io, tty: false, env: {}, exitNow: () => {} });
  return { code, out: io.out.text, err: io.err.text };
}

describe('actorloop command lines', () => {
  it('gives clear errors and exit codes: no data dir, unknown session, bad arguments, corrupt log', async () => {
    const missing = join(dir.path, 'nothing-here');
    const noData = await cliHere(['sessions', '--data', missing]);
    expect([noData.code, noData.err]).toEqual([4, expect.stringContaining(`actorloop: no actorloop data at ${missing}`)]);
    // docs/cli.md: "Pasted into a shell in the same directory, each runs": the demo it names writes this data dir
    expect(noData.err).toContain(`demo --data ${missing}\``);
    expect(existsSync(missing)).toBe(false);
    const notData = await cliHere(['log', 's', '--data', join(dir.path, '..')]);
    expect([notData.code, notData.err]).toEqual([4, expect.stringContaining('is not an actorloop data dir')]);
    const unknown = await cliHere(['log', 'nope', '--data', dir.path]);
    expect([unknown.code, unknown.err]).toEqual([4, expect.stringContaining('unknown session "nope"')]);
    const badFrom = await cliHere(['log', 'done', '--data', dir.path, '--from', 'abc']);
    expect([badFrom.code, badFrom.err]).toEqual([2, expect.stringContaining('--from: a whole number')]);
    const badProvider = await cliHere(['demo', '--provider', 'gpt']);
    expect([badProvider.code, badProvider.err]).toEqual([2, expect.stringContaining("argument 'gpt' is invalid")]);
    // docs/cli.md: a bad value is exit 2; `-o ''` was `EISDIR …`, exit 1
    const noOutput = await cliHere(['view', 'done', '--data', dir.path, '-o', '']);
    expect([noOutput.code, noOutput.err]).toEqual([2, 'actorloop: --output: a file path is required (got "")\n']);
    const dirOutput = await cliHere(['view', 'done', '--data', dir.path, '-o', dir.path]);
    expect([dirOutput.code, dirOutput.err]).toEqual([
      2,
      `actorloop: --output: a file to write, not a directory (got ${JSON.stringify(dir.path)})\n`,
    ]);
    const noSession = await cliHere(['view']);
    expect([noSession.code, noSession.err]).toEqual([2, expect.stringContaining("missing required argument 'session'")]);
    const corrupt = await cliHere(['view', 'victim', '--data', dir.path, '-o', join(dir.path, 'v.html')]);
    expect([corrupt.code, corrupt.err]).toEqual([3, expect.stringContaining('corrupt log: session victim, seq 3')]);
    expect(existsSync(join(dir.path, 'v.html'))).toBe(false);
    const none = await cliHere([]);
    expect([none.code, none.err]).toEqual([2, expect.stringContaining('Usage: actorloop')]);
    const version = await cliHere(['--version']);
    expect([version.code, version.out.trim()]).toEqual([0, JSON.parse(readFileSync('package.json', 'utf8')).version]);
  });

  it('-f is --follow (tail always follows; log -f follows after the whole log); --from has no short form, and the old `-f SEQ` is refused naming --from', async () => {
    /** A following command, stopped (Ctrl-C) once `ready` holds for its output. */
    const followed = async (args: string[], ready: (out: string) => boolean) => {
      const io = capture();
      let interrupt: (() => void) | undefined;
      const code = runCli(['node', 'actorloop', ...args], {
        ...io,
        onInterrupt: (h) => ((interrupt = h), () => {}),
        tty: false,
        env: {},
        exitNow: () => {},
      });
      await vi.waitFor(() => expect(ready(io.out.text) && io.err.text.includes('following done')).toBe(true), {
        timeout: 20_000,
        interval: 20,
      });
      interrupt!();
      return { code: await code, out: io.out.text };
    };
    const seqs = (out: string) =>
      out
        .trim()
        .split('\n')
        .map((l) => Number(l.trim().split(/\s+/)[0]));
    const last = (await cliHere(['log', 'done', '--data', dir.path])).out.trim().split('\n').length;
    const log = await followed(['log', 'done', '--data', dir.path, '-f'], (o) => o.trim().split('\n').length >= last);
    expect([log.code, seqs(log.out)]).toEqual([0, Array.from({ length: last }, (_, i) => i + 1)]);
    const tail = await followed(['tail', 'done', '-f', '--data', dir.path, '--from', '2'], (o) => o.trim().split('\n').length >= last - 1);
    expect([tail.code, seqs(tail.out)[0]]).toEqual([0, 2]);
    for (const cmd of ['tail', 'log']) {
      const old = await cliHere([cmd, 'done', '--data', dir.path, '-f', '2']);
      expect([old.code, old.err]).toEqual([2, 'actorloop: -f is --follow; to start at seq 2, pass --from 2\n']);
    }
    const from = await cliHere(['log', 'done', '--data', dir.path, '--from', String(last)]);
    expect([from.code, seqs(from.out)]).toEqual([0, [last]]);
  });

  // docs/cli.md: "`--data` (`-d`) is the data dir … `./.actorloop` by default"; help printed no default
  it("every command's help shows the --data default, ./.actorloop", async () => {
    for (const cmd of ['demo', 'web', 'sessions', 'workers', 'log', 'tail', 'recover', 'view']) {
      const io = capture();
      expect(await runCli(['node', 'actorloop', cmd, '--help'], { ...io, tty: false, env: {}, exitNow: () => {} })).toBe(0);
      expect(io.out.text, cmd).toMatch(/-d, --data <dir>\s+data dir \(the LMDB event log;\s+default:\s+\.\/\.actorloop\)/);
    }
  });

  it('migrate --help offers no --data: migrate works on PostgreSQL only', async () => {
    const io = capture();
    const code = await runCli(['node', 'actorloop', 'migrate', '--help'], { ...io, tty: false, env: {}, exitNow: () => {} });
    expect(code).toBe(0);
    expect(io.out.text).toMatch(/--postgres <url>\s+the PostgreSQL database \(default: \$ACTORLOOP_DATABASE_URL\)/);
    expect(io.out.text).not.toMatch(/--data|data dir/);
  });

  it('exits with those codes as a process too', async () => {
    const [noData, corrupt] = await Promise.all([
      cli(['sessions', '--data', join(dir.path, 'nothing-here')]),
      cli(['log', 'victim', '--data', dir.path]),
    ]);
    expect([noData.code, noData.err]).toEqual([4, expect.stringMatching(/^actorloop: no actorloop data at /)]);
    expect([corrupt.code, corrupt.err]).toEqual([3, expect.stringMatching(/^actorloop: corrupt log: session victim, seq 3: /)]);
    expect(corrupt.out).toMatch(/^\s*1\s.*session\/attached/); // the intact records were printed first
  });

  it('tail follows appends made by another process until Ctrl-C', async () => {
    const store = lmdbStore({ path: dir.path });
    const { writerEpoch, lastSeq } = await store.attachWriter('followed');
    await store.append('followed', writerEpoch, lastSeq + 1, [
      { ...at(0, 0), type: 'state/updated', surfaceOp: 'none', payload: { stateContext: { n: 0 } } },
    ]);
    const tail = spawnTs(CLI, ['tail', 'followed', '--data', dir.path], { label: 'tail' });
    await tail.waitFor((l) => l.includes('state/updated') && l.includes('"n":0'), 20_000, 'the existing event');
    for (let n = 1; n <= 3; n++) {
      await store.append('followed', writerEpoch, lastSeq + 1 + n, [
        { ...at(0, 0), type: 'state/updated', surfaceOp: 'none', payload: { stateContext: { n } } },
      ]);
      await tail.waitFor((l) => l.includes(`"n":${n}`), 5_000, `appended event ${n}`);
    }
    await store.close();
    tail.signal('SIGINT');
    expect((await tail.waitExit(10_000)).code).toBe(0);
    expect(tail.lines.filter((l) => l.includes('state/updated')).map((l) => l.trim().split(/\s+/)[0])).toEqual(['1', '2', '3', '4']);
    expect(tail.stderr).toContain('following followed');
  });
});
