import { readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { evaluate, formatNumber } from '../../src/cli/calculator.js';
import { chooseProvider, demoPolicy, paced } from '../../src/cli/demo-agent.js';
import { scriptedModel } from '../../src/providers/scripted.js';
import { demoPaths, demoTools, prepareDemoFiles, sandboxed } from '../../src/cli/demo-tools.js';
import { newSessionId, runDemo, type DemoIO } from '../../src/cli/demo.js';
import { runCli } from '../../src/cli/program.js';
import type { ModelRequest } from '../../src/contracts/model.js';
import type { AnyTool, ToolContext } from '../../src/tools/define-tool.js';
import { lmdbStore } from '../../src/index.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

const dirs: ReturnType<typeof tempDir>[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.cleanup();
});
const tmp = () => {
  const d = tempDir('actorloop-demo-');
  dirs.push(d);
  return d.path;
};

/** An in-process DemoIO: output in a string; `onLine` sees every completed line. */
function captureIO(onLine: (line: string, io: { interrupt(): void }) => void = () => {}) {
  let text = '';
  let partial = '';
  let handler: (() => void) | undefined;
  const ctl = { interrupt: () => handler?.() };
  const io: DemoIO & { text(): string } = {
    out: {
      write: (s: string) => {
        text += s;
        const parts = (partial + s).split('\n');
        partial = parts.pop()!;
        for (const l of parts) onLine(l, ctl);
        return true;
      },
    },
    tty: false,
    color: false,
    onInterrupt: (h) => {
      handler = h;
      return () => (handler = undefined);
    },
    exitNow: (code) => {
      throw new Error(`exitNow(${code}) called`);
    },
    text: () => text,
  };
  return io;
}

describe('the calculator', () => {
  it('evaluates arithmetic without eval, and says what is wrong', () => {
    expect(formatNumber(evaluate('(1 - 0.999) * 30 * 24 * 60'))).toBe('43.2');
    expect(evaluate('2 ^ 3 ^ 2')).toBe(512);
    expect(evaluate('-(4 + 2) * 3 % 5')).toBe(-3);
    expect(() => evaluate('1 / 0')).toThrow('division by zero');
    expect(() => evaluate('process.exit(1)')).toThrow(/unexpected "p"/);
    expect(() => evaluate('(1 + 2')).toThrow('missing )');
    expect(() => evaluate('1 2')).toThrow(/after the end/);
  });
});

describe('the demo tools', () => {
  const ctx = (over: Partial<ToolContext> = {}): ToolContext => ({
    signal: new AbortController().signal,
    idempotencyKey: 's/r/c1',
    sessionId: 's',
    runId: 'r',
    callId: 'c1',
    emit: () => {},
    ...over,
  });
  const setup = () => {
    const paths = demoPaths(tmp());
    prepareDemoFiles(paths);
    const tools = Object.fromEntries(demoTools(paths, 0.01).map((t) => [t.name, t])) as Record<string, AnyTool>;
    return { paths, tools };
  };

  it('reads only inside the sandbox', async () => {
    const { paths, tools } = setup();
    expect(await tools.read_file!.execute({ path: 'release-notes.md' }, ctx())).toContain('checkout 2.4.0');
    writeFileSync(join(paths.sandbox, '..', 'secret.txt'), 'secret');
    symlinkSync(join(paths.sandbox, '..', 'secret.txt'), join(paths.sandbox, 'link.txt'));
    expect(() => sandboxed(paths.sandbox, '../secret.txt')).toThrow('outside the sandbox');
    expect(() => sandboxed(paths.sandbox, '/etc/passwd')).toThrow('absolute paths are not allowed');
    expect(() => sandboxed(paths.sandbox, 'link.txt')).toThrow('links outside the sandbox');
    expect(() => sandboxed(paths.sandbox, 'nope.md')).toThrow('no such file');
  });

  it('deploys once per idempotency key, honours its signal, and reconciles from its record', async () => {
    const { paths, tools } = setup();
    const deploy = tools.deploy!;
    const args = { service: 'checkout', version: '2.4.0', environment: 'staging' };
    expect(deploy.mode).toBe('exclusive');
    const first = await deploy.execute(args, ctx());
    expect(first).toMatch(/^deployed checkout 2\.4\.0 to staging \(deployment dep-[0-9a-f]{8}\)$/);
    expect(await deploy.execute(args, ctx())).toContain('already done for this call, not deployed again');
    expect(await deploy.reconcile!(args, ctx())).toMatchObject({
      kind: 'completed',
      content: expect.stringContaining('confirmed by reconcile'),
    });

    const ac = new AbortController();
    const running = deploy.execute(args, ctx({ idempotencyKey: 's/r/c2', signal: ac.signal }));
    ac.abort(new Error('cancelled by test'));
    await expect(running).rejects.toThrow('cancelled by test');
    expect(await deploy.reconcile!(args, ctx({ idempotencyKey: 's/r/c2' }))).toMatchObject({ kind: 'cancelled', settled: true });
    const records = readdirSync(paths.deployments).map((f) => JSON.parse(readFileSync(join(paths.deployments, f), 'utf8')).status);
    expect(records.sort()).toEqual(['aborted', 'done']);
  });
});

describe('the offline demo agent', () => {
  const req = (messages: ModelRequest['messages']): ModelRequest => ({ messages, tools: [], signal: new AbortController().signal });

  it('decides from the conversation, so a resumed run takes the next step', () => {
    const user = { role: 'user' as const, content: 'go' };
    const first = demoPolicy(req([user])) as { toolCalls: { id: string; name: string }[] };
    expect(first.toolCalls.map((c) => `${c.id}:${c.name}`)).toEqual([
      'c1_0:read_file',
      'c1_1:read_file',
      'c1_2:calculate',
      'c1_3:calculate',
    ]);
    const asked = { role: 'assistant' as const, content: '' };
    const tool = (name: string, content: string) => ({ role: 'tool' as const, name, content, toolCallId: 'x' });
    const afterReads = [user, asked, tool('calculate', '1 = 43.2'), tool('calculate', '2 = 4')];
    expect(demoPolicy(req(afterReads))).toMatchObject({ toolCalls: [{ id: 'c2_0', name: 'deploy' }] });
    const interrupted = [...afterReads, asked, tool('deploy', 'Cancelled: interrupted')];
    expect(demoPolicy(req(interrupted))).toMatchObject({ toolCalls: [{ id: 'c3_0', name: 'deploy' }] });
    const done = [...interrupted, asked, tool('deploy', 'deployed checkout 2.4.0 to staging (deployment dep-1)')];
    expect(demoPolicy(req(done))).toMatchObject({ text: expect.stringContaining('43.2 minutes') });
  });

  it('is offline unless asked or given an API key', () => {
    expect(chooseProvider(undefined, {})).toBe('scripted');
    expect(chooseProvider(undefined, { ANTHROPIC_API_KEY: 'k' })).toBe('anthropic');
    expect(chooseProvider(undefined, { OPENAI_API_KEY: 'k', ANTHROPIC_API_KEY: 'k' })).toBe('openai');
    expect(chooseProvider('scripted', { OPENAI_API_KEY: 'k' })).toBe('scripted');
    expect(newSessionId(new Date(2026, 0, 2, 3, 4, 5))).toMatch(/^demo-20260102-030405-[0-9a-f]{4}$/);
  });

  it('paces a model without hiding who serves it or its structured-output mode', () => {
    const inner = {
      modelId: 'm',
      providerName: 'openai',
      structuredOutput: 'native' as const,
      call: () => Promise.reject(new Error('unused')),
    };
    expect(paced(inner, 1)).toMatchObject({ modelId: 'm', providerName: 'openai', structuredOutput: 'native' });
    expect(Object.keys(paced(scriptedModel(['x'], { modelId: 's' }), 1))).not.toContain('structuredOutput');
  });
});

describe('actorloop demo, in process', () => {
  it('runs parallel and exclusive tools to a delivered final answer', async () => {
    const data = tmp();
    const io = captureIO();
    expect(await runDemo({ data, session: 's1', provider: 'scripted', pace: 0.05 }, io)).toBe(0);
    const out = io.text();
    expect(out).toMatch(/tool start read_file c1_0 \[parallel\]/);
    expect(out).toMatch(/tool start calculate c1_3 \[parallel\]/);
    expect(out).toMatch(/tool start deploy c2_0 \[exclusive\]/);
    expect(out).toContain('delivered final answer');
    expect(out).toMatch(/^outcome: completed \(status succeeded, 3 steps/m);
    expect(out).toMatch(/^session: s1$/m);

    // the same session again: nothing to resume, so a new run (turn 2)
    const again = captureIO();
    expect(await runDemo({ data, session: 's1', provider: 'scripted', pace: 0.05 }, again)).toBe(0);
    expect(again.text()).toContain('recovery found: nothing to resume');
    expect(again.text()).toMatch(/turn 2: attempt/);
  });

  it('detaches on the first Ctrl-C, exits 130, and a second demo continues the run', async () => {
    const data = tmp();
    const io = captureIO((line, ctl) => {
      if (line.includes('tool start deploy')) ctl.interrupt();
    });
    expect(await runDemo({ data, session: 's2', provider: 'scripted', pace: 0.05 }, io)).toBe(130);
    expect(io.text()).toContain('Ctrl-C: detaching after the current step');
    expect(io.text()).toMatch(/^outcome: incomplete \(status detached/m);
    expect(io.text()).toContain('resume with: actorloop demo --session s2 --data');

    const resumed = captureIO();
    expect(await runDemo({ data, session: 's2', provider: 'scripted', pace: 0.05 }, resumed)).toBe(0);
    const out = resumed.text();
    expect(out).toContain('recovery found: 1 interrupted run');
    expect(out).toMatch(/interrupted run r-\S+ \(turn 1, .*\): last attempt ended detached/);
    expect(out).toMatch(/continuing run r-\S+ with a new attempt/);
    expect(out).toMatch(/^outcome: completed/m);
    // the deploy finished before the detach took effect: it is not run again
    expect(out).not.toContain('tool start deploy');
    const store = lmdbStore({ path: data });
    const types = (await collect(store.readEvents('s2'))).map((e) => e.type);
    await store.close();
    expect(types.filter((t) => t === 'run/start')).toHaveLength(2);
    expect(types.at(-1)).toBe('run/end');
  });

  it('refuses bad options before touching anything', async () => {
    await expect(runDemo({ session: '', provider: 'scripted' }, captureIO())).rejects.toThrow(/a session id is required/);
    await expect(runDemo({ provider: 'gpt' as never }, captureIO())).rejects.toThrow(/--provider/);
  });
});

/** runCli in this process, its output captured. */
async function cliHere(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; out: string; err: string }> {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (s: string) => ((err.text += s), true) };
  const code = await runCli(['node', 'actorloop', ...args], { out, err, onInterrupt: () => () => {}, tty: false, env, exitNow: () => {} });
  return { code, out: out.text, err: err.text };
}

describe('actorloop demo options', () => {
  // docs/cli.md: "Errors are one line on stderr starting with `actorloop:`"; a bad value is exit 2,
  // named as `--from abc` is; a database URL is shown with its password as `***`. The demo's errors
  // were zod's words, the whole options object appended (a password the user never typed included).
  it('a bad option names its flag or variable and its value, a database password shown as ***', async () => {
    const url = 'postgres://postgres:s3cret@127.0.0.1:5432/x';
    const cases: [string[], NodeJS.ProcessEnv, string][] = [
      [['demo', '--session', '', '--postgres', url], {}, '--session: a session id is required (got "")'],
      [['demo', '--session', ''], { ACTORLOOP_DATABASE_URL: url }, '--session: a session id is required (got "")'],
      [['demo', '-d', ''], {}, '--data: a directory is required (got "")'],
      [['demo', '--postgres', 'postgres://u:s3cret@h:99999/x'], {}, '--postgres: not a valid URL (got "postgres://u:***@h:99999/x")'],
      [
        ['demo'],
        { ACTORLOOP_DATABASE_URL: 'mysql://u:s3cret@h/x' },
        'ACTORLOOP_DATABASE_URL: a postgres:// URL such as postgres://user@host:5432/db (got "mysql://u:***@h/x")',
      ],
      [['demo'], { ACTORLOOP_DEMO_PACE: 'abc' }, 'ACTORLOOP_DEMO_PACE: a number from 0 (no delays) to 10 (got "abc")'],
      [['demo'], { ACTORLOOP_DEMO_PACE: '20' }, 'ACTORLOOP_DEMO_PACE: a number from 0 (no delays) to 10 (got "20")'],
    ];
    for (const [args, env, expected] of cases) {
      const r = await cliHere(args, env);
      expect([r.code, r.err], args.join(' ')).toEqual([2, `actorloop: ${expected}\n`]);
      expect(r.out).toBe('');
    }
  });

  it('ACTORLOOP_DEMO_PACE=0 runs the demo without delays', async () => {
    const r = await cliHere(['demo', '--provider', 'scripted', '--data', tmp(), '--session', 'fast'], { ACTORLOOP_DEMO_PACE: '0' });
    expect([r.code, r.err]).toEqual([0, '']);
    expect(r.out).toMatch(/^outcome: completed/m);
  });
});
