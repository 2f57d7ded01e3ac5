import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { tempDir } from '../helpers/tmp.js';
import { treeViolations } from './agent-tree.js';
import { crashRounds, killAllChildren, REPO_ROOT, sleep, spawnTs } from './child-util.js';

/**
 * The agent tree (agent-tree.ts: orchestrator → two parallel researcher sub-agents → each an
 * exclusive ledger tool) in real processes on one LMDB file, SIGKILLed at each point of the
 * parent-child hand-over and at random instants; then one life runs it to the end. Set
 * ACTORLOOP_CRASH_ROUNDS for a longer random torture (`npm run torture:agents`: 200 lives).
 */
const CHILD = join(REPO_ROOT, 'test/crash/agent-tree-child.ts');
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await killAllChildren();
  for (const c of cleanups.splice(0)) await c();
});

function life(dir: string, killAt: string) {
  return spawnTs(CHILD, [dir, killAt], { label: `agent-tree-child ${killAt}` });
}

async function finish(dir: string): Promise<string> {
  const last = life(dir, 'none');
  await last.waitExit(120_000);
  expect(last.lines, last.describe()).toContain('DONE');
  return last.lines.find((l) => l.startsWith('RESULT '))!;
}

async function violations(dir: string): Promise<string[]> {
  const store = lmdbStore({ path: join(dir, 'db') });
  try {
    return await treeViolations(store, join(dir, 'ledger'));
  } finally {
    await store.close();
  }
}

describe('an agent tree killed with SIGKILL (real child processes)', () => {
  it.each(['parent-intent', 'child-intent', 'child-end', 'parent-result'])(
    "killed right after %s: the next process settles the tree, each child answer committed in its parent once, no ledger entry twice, each child's spending counted once in the root's result and within maxCost",
    async (killAt) => {
      const dir = tempDir('actorloop-agent-tree-');
      cleanups.push(() => dir.cleanup());
      const first = life(dir.path, killAt);
      const exit = await first.waitExit(120_000);
      expect(exit.signal, first.describe()).toBe('SIGKILL');
      expect(first.lines, first.describe()).toContain(`KILL ${killAt}`);
      const result = JSON.parse((await finish(dir.path)).slice('RESULT '.length));
      expect(result).toMatchObject({ status: 'succeeded', uncertainCalls: [] });
      // killed between a ledger call's intent and its effect: the child reports it uncertain
      // (its reconcile found no entry), and the parent's result for that child names it
      if (killAt === 'child-intent') expect(result.finalMessage).toMatch(/^summary: noted alpha.*left uncertain by a crash: ledger l1/);
      else expect(result.finalMessage).toBe('summary: noted alpha | noted beta');
      expect(await violations(dir.path)).toEqual([]);
    },
    240_000,
  );

  it(
    'killed at random instants, the tree settles with every invariant of the hand-over kept',
    async () => {
      const dir = tempDir('actorloop-agent-tree-');
      cleanups.push(() => dir.cleanup());
      const kills = crashRounds(1);
      let killed = 0;
      for (let i = 0; i < kills; i++) {
        const run = life(dir.path, 'none');
        await run.waitFor((l) => l === 'READY' || l === 'DONE', 120_000, 'READY');
        await sleep(Math.floor(Math.random() * 250));
        run.signal('SIGKILL');
        const exit = await run.waitExit(120_000);
        if (exit.signal === 'SIGKILL') killed++;
        else expect(run.lines, run.describe()).toContain('DONE');
      }
      await finish(dir.path);
      expect(await violations(dir.path)).toEqual([]);
      console.log(`agent tree torture: ${killed} SIGKILLs of ${kills} lives, 0 violations`);
    },
    60 * 60_000,
  );
});
