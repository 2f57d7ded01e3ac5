import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { REPO_ROOT, killAllChildren, spawnTs } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';

/** Every example runs with `npx tsx` (here: node --import tsx) and prints what its comments promise. */
const dir = tempDir('actorloop-examples-');
afterEach(async () => {
  await killAllChildren();
});
afterAll(async () => {
  await dir.cleanup();
});

async function run(example: string, args: string[]): Promise<string> {
  const child = spawnTs(`examples/${example}`, args, { label: example });
  const exit = await child.waitExit(30_000);
  expect(exit.code, child.describe()).toBe(0);
  return child.lines.join('\n');
}

describe('examples/', () => {
  it("basic.ts (the README's first agent): killed (SIGKILL) mid-tool and started again, it finishes the interrupted run first, never re-running its call", async () => {
    const data = join(dir.path, 'basic');
    const first = spawnTs('examples/basic.ts', [data], { label: 'basic.ts (killed while it adds)' });
    await first.waitFor((l) => l === 'adding 2 + 40…', 30_000, 'the add to start');
    first.signal('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');
    // what the README says the second start prints
    expect(await run('basic.ts', [data])).toBe(
      ['adding 2 + 40…', 'The answer is 42.', 'succeeded (interrupted run finished first; not re-run: add)'].join('\n'),
    );
  });

  it('approval.ts: suspends for approval, then runs (or not) on the answer', async () => {
    const [approved, denied] = await Promise.all([
      run('approval.ts', [join(dir.path, 'approve'), 'approve']),
      run('approval.ts', [join(dir.path, 'deny'), 'deny']),
    ]);
    expect(approved).toContain('first attempt: suspended suspended');
    expect(approved).toContain('needs approval: transfer({"to":"ACME","amount":250}) [t1]');
    expect(approved).toContain('after respond: completed succeeded - Paid ACME 250.');
    expect(denied).toContain('after respond: completed succeeded - The transfer was not approved; nothing was paid.');
  });

  it('inspector.ts: the @statelyai/inspect adapter sees the session, run and toolBatch machines', async () => {
    const file = join(dir.path, 'inspect.jsonl');
    const out = await run('inspector.ts', [file]);
    expect(out).toContain('outcome: completed');
    for (const m of ['session', 'run', 'toolBatch']) expect(out).toMatch(new RegExp(`^snapshots of ${m}: [1-9]\\d*$`, 'm'));
    const events = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string });
    expect(events.filter((e) => e.type === '@xstate.snapshot').length).toBeGreaterThan(10);
  });

  it('streaming.ts: the text streams, then the result', async () => {
    expect(await run('streaming.ts', [join(dir.path, 'streaming')])).toBe('It is 21 °C in Oslo.\nsucceeded in 2 steps');
  });

  it('typed-output.ts: the answer comes back as the parsed, typed object', async () => {
    expect(await run('typed-output.ts', [join(dir.path, 'typed')])).toBe('INV-7 12.5 tea');
  });

  it('agents.ts: two researcher sub-agents in parallel, then a handoff to the writer, whose typed answer comes back', async () => {
    expect(await run('agents.ts', [join(dir.path, 'agents')])).toBe('succeeded Tea and coffee');
  });

  it("agents.ts --inspect: the inspector's tree shows each researcher's session under the tool-call actor that runs it", async () => {
    const lines = (await run('agents.ts', [join(dir.path, 'agents-inspected'), '--inspect'])).split('\n');
    expect(lines[0]).toBe('succeeded Tea and coffee');
    const depth = (l: string) => l.length - l.trimStart().length;
    const calls = lines.flatMap((l, i) => (/^\s+toolCall call-\d$/.test(l) ? [i] : []));
    expect(calls).toHaveLength(2);
    for (const [n, at] of calls.entries()) {
      const child = lines[at + 1]!;
      expect(child.trim()).toMatch(new RegExp(`^session report-\\d+/[^/]+/1/r${n}: idle → .* → closed$`));
      expect(depth(child)).toBe(depth(lines[at]!) + 2);
      expect(lines[at + 2]!.trim()).toMatch(/^run: starting → .* → done$/);
    }
  });

  it("the README's typed-output example is examples/typed-output.ts, right after the agent with a tool", () => {
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const block = /## Typed output\n\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBe(readFileSync(join(REPO_ROOT, 'examples/typed-output.ts'), 'utf8'));
    expect(block).toContain("const { output } = await session.run('");
    const order = ['## An agent with a tool', '## Typed output', '## Streaming text'].map((h) => readme.indexOf(h));
    expect(order.every((at, i) => at >= 0 && (i === 0 || at > order[i - 1]!))).toBe(true);
  });

  it('every example imports actorloop as an app does, never from src/', () => {
    for (const f of readdirSync(join(REPO_ROOT, 'examples')).filter((f) => f.endsWith('.ts'))) {
      const imports = [...readFileSync(join(REPO_ROOT, 'examples', f), 'utf8').matchAll(/from '([^']+)'/g)].map((m) => m[1]!);
      expect(
        imports.filter((i) => i.includes('/src/') || i.startsWith('../')),
        f,
      ).toEqual([]);
    }
  });

  it('run without arguments from the repository root, inspector.ts and mcp.ts write nothing there and print where they wrote', async () => {
    const before = new Set(readdirSync(REPO_ROOT));
    const [inspector, mcp] = await Promise.all([run('inspector.ts', []), run('mcp.ts', [])]);
    const events = /^inspection events written to (.+)$/m.exec(inspector)?.[1];
    const data = /^data in (.+)$/m.exec(mcp)?.[1];
    expect(readdirSync(REPO_ROOT).filter((e) => !before.has(e))).toEqual([]);
    for (const path of [events, data]) {
      expect(path && existsSync(path), `${path} exists`).toBe(true);
      expect(relative(REPO_ROOT, path!).startsWith('..'), `${path} is outside the repository`).toBe(true);
    }
    // each made a folder of its own in the OS temp dir
    for (const folder of [dirname(events!), data!]) {
      expect(dirname(folder)).toBe(tmpdir());
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it("the README's streaming example is examples/streaming.ts, ten lines after its imports", () => {
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const block = /## Streaming text\n\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const example = readFileSync(join(REPO_ROOT, 'examples/streaming.ts'), 'utf8');
    expect(block).toBe(example);
    expect(
      block!
        .trim()
        .split('\n')
        .filter((l) => l !== '' && !l.startsWith('import ')).length,
    ).toBeLessThanOrEqual(10);
  });

  it("the README's first agent is examples/basic.ts, importing from the package, in 15 lines without run, attempt or question ids", () => {
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const block = /## An agent with a tool\n\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const basic = readFileSync(join(REPO_ROOT, 'examples/basic.ts'), 'utf8');
    expect(block).toBe(basic);
    expect(block!.trim().split('\n').length).toBeLessThanOrEqual(15);
    expect(block).not.toMatch(/runId|attemptId|questionId/);
    // it is the README's first TypeScript block
    expect(readme.indexOf('```ts')).toBe(readme.indexOf('## An agent with a tool\n\n```ts') + '## An agent with a tool\n\n'.length);
  });
});
