import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { tempDir } from '../helpers/tmp.js';
import { treeViolations } from './agent-tree.js';
import { crashRounds, killAllChildren, REPO_ROOT, sleep, spawnTs } from './child-util.js';

/**
 * The agent tree (agent-tree.ts: orchestrator → two parallel researcher sub-agents → each an
 * exclusive ledger tool) in real processes on one LMDB file, SIGKILLed at each point of the
 * parent-child hand-over and at random instants; then one life runs it to the end. Set
 * ACTORLOOP_CRASH_ROUNDS for a longer random torture (`npm run torture:agents`: 200 SIGKILLs, each of a tree
 * at work — a new tree once one has settled).
 */
const CHILD = join(REPO_ROOT, 'test/crash/agent-tree-child.ts');
const cleanups: (() => Promise<void>)[] = [];
// the kill points run concurrently (each on its own LMDB file): children are killed and files removed after all of them
afterAll(async () => {
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
  it.concurrent.for(['parent-intent', 'child-intent', 'child-end', 'parent-result'])(
    "killed right after %s: the next process settles the tree, each child answer committed in its parent once, no ledger entry twice, each child's spending counted once in the root's result and within maxCost",
    { timeout: 240_000 },
    async (killAt, { expect }) => {
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
      // (elsewhere the other child, running concurrently, may also have been killed mid-ledger and name it)
      else expect(result.finalMessage).toMatch(/^summary: noted alpha.*\| noted beta/);
      expect(await violations(dir.path)).toEqual([]);
    },
  );

  it(
    'killed at random instants, every tree settles with every invariant of the hand-over kept',
    async () => {
      // every kill lands on a tree at work: once a tree has settled, the next lives work on a new one
      const kills = crashRounds(1);
      const newTree = () => {
        const d = tempDir('actorloop-agent-tree-');
        cleanups.push(() => d.cleanup());
        return d.path;
      };
      let dir = newTree();
      let killed = 0;
      let lives = 0;
      let trees = 0;
      const t0 = Date.now();
      while (killed < kills && lives < 4 * kills + 10) {
        lives++;
        const run = life(dir, 'none');
        await run.waitFor((l) => l === 'READY' || l === 'DONE', 120_000, 'READY');
        // a tree's life works for about 100-200 ms after READY (models answer in 15 ms)
        await sleep(Math.floor(Math.random() * 150));
        run.signal('SIGKILL');
        const exit = await run.waitExit(120_000);
        if (exit.signal === 'SIGKILL') {
          killed++;
          continue;
        }
        expect(run.lines, run.describe()).toContain('DONE');
        expect(await violations(dir), `tree ${trees + 1} in ${dir}`).toEqual([]);
        trees++;
        dir = newTree();
      }
      await finish(dir);
      expect(await violations(dir)).toEqual([]);
      trees++;
      expect(killed, `${killed} SIGKILLs in ${lives} lives`).toBeGreaterThanOrEqual(kills);
      console.log(
        `agent tree torture: ${killed} SIGKILLs in ${lives} lives over ${trees} trees, 0 violations, ${Math.round((Date.now() - t0) / 1000)} s`,
      );
    },
    60 * 60_000,
  );
});
