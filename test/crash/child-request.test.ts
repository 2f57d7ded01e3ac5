import { cpSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, REPO_ROOT, spawnTs } from './child-util.js';

// A child's approval answered through its parent across a restart (real processes, SIGKILL, one
// LMDB file): the parent suspended on the child's request is killed; the next process finds the
// same pending request, answers it through the parent — killed again at each point of routing the
// answer down and the child's answer up — and the last process settles the tree: the charge is
// run at most once (never silently twice), and the child's answer is committed in the parent once.

const PROGRAM = join(REPO_ROOT, 'test/crash/child-request-child.ts');
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await killAllChildren();
  for (const c of cleanups.splice(0)) await c();
});

const life = (dir: string, ...args: string[]) => spawnTs(PROGRAM, [dir, ...args], { label: `child-request ${args.join(' ')}` });
const jsonAfter = (lines: string[], prefix: string) => JSON.parse(lines.find((l) => l.startsWith(prefix))!.slice(prefix.length));

async function logOf(dir: string, id: string): Promise<EventRecord[]> {
  const store = lmdbStore({ path: join(dir, 'db') });
  try {
    return await collect(store.readEvents(id));
  } finally {
    await store.close();
  }
}

describe("a child's approval answered through its parent across a restart", () => {
  // one process suspends the parent on its child's request and is killed; each test starts from a copy of that log
  const base = tempDir('actorloop-child-request-base-');
  let request: unknown;
  beforeAll(async () => {
    const asking = life(base.path, 'ask');
    const suspended = await asking.waitFor((l) => l.startsWith('SUSPENDED '), 120_000, 'the parent to suspend');
    request = JSON.parse(suspended.slice('SUSPENDED '.length));
    asking.signal('SIGKILL');
    expect((await asking.waitExit(60_000)).signal).toBe('SIGKILL');
  }, 180_000);
  afterAll(() => base.cleanup());
  const suspendedCopy = () => {
    const dir = tempDir('actorloop-child-request-');
    cleanups.push(() => dir.cleanup());
    cpSync(base.path, dir.path, { recursive: true });
    return dir.path;
  };

  it("the suspended parent's request names the child that asked", () => {
    expect(request).toMatchObject({
      kind: 'approval',
      questionId: 'approval-k1',
      path: ['s/r/1/c1'],
      calls: [{ callId: 'k1', name: 'charge' }],
    });
  });

  // (the program also kills after child-charged, child-end and parent-result: the hand-over points agent-tree.test.ts covers)
  it.each(['parent-answered', 'child-answered'])(
    "suspended parent killed, then answered and killed after %s: the tree settles with the child's answer in the parent once, the charge never run twice",
    async (killAt) => {
      const dir = { path: suspendedCopy() };
      const responding = life(dir.path, 'respond', killAt);
      const exit = await responding.waitExit(120_000);
      expect(exit.signal, responding.describe()).toBe('SIGKILL');
      expect(responding.lines).toContain(`KILL ${killAt}`);
      const finishing = life(dir.path, 'finish');
      await finishing.waitExit(120_000);
      expect(finishing.lines, finishing.describe()).toContain('DONE');
      // the answer was recorded in the parent: it waits no more, its next attempt routes it down
      expect(finishing.lines.some((l) => l.startsWith('PENDING '))).toBe(false);
      const result = jsonAfter(finishing.lines, 'RESULT ');
      expect(result.status).toBe('succeeded');
      const ledger = join(dir.path, 'ledger');
      const charges = existsSync(ledger) ? readFileSync(ledger, 'utf8').split('\n').filter(Boolean) : [];
      if (killAt === 'child-answered') {
        // killed between the charge's intent and its start: the child reports it uncertain (the
        // ledger has no entry), and the parent's result names it — never run again silently
        expect(charges).toEqual([]);
        expect(result.finalMessage).toMatch(/^Paid: payer: Outcome uncertain: .*left uncertain by a crash: charge k1\)$/);
      } else {
        expect(charges).toEqual(['s/r/1/c1/answer/1/k1']);
        expect(result.finalMessage).toBe('Paid: payer: charged 5');
      }
      const root = await logOf(dir.path, 's');
      expect(root.filter((e) => e.type === 'tool/result' && e.payload.callId === 'c1')).toHaveLength(1);
      const child = await logOf(dir.path, 's/r/1/c1');
      expect(child.filter((e) => e.type === 'run/start' && e.payload.kind === 'prompt')).toHaveLength(1);
      expect(child.filter((e) => e.type === 'run/end').at(-1)!.payload.status).toBe('succeeded');
    },
    240_000,
  );

  it('a suspended parent killed before any answer waits after a restart for the same request; answered then, the child goes on and its answer is committed once', async () => {
    const dir = { path: suspendedCopy() };
    const finishing = life(dir.path, 'finish');
    await finishing.waitExit(120_000);
    expect(finishing.lines, finishing.describe()).toContain('DONE');
    expect(jsonAfter(finishing.lines, 'PENDING ')).toEqual(request);
    expect(jsonAfter(finishing.lines, 'RESULT ')).toMatchObject({ status: 'succeeded', finalMessage: 'Paid: payer: charged 5' });
    expect(readFileSync(join(dir.path, 'ledger'), 'utf8').split('\n').filter(Boolean)).toEqual(['s/r/1/c1/answer/1/k1']);
    expect((await logOf(dir.path, 's')).filter((e) => e.type === 'tool/result' && e.payload.callId === 'c1')).toHaveLength(1);
  }, 240_000);
});
