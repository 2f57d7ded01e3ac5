import { join } from 'node:path';
import { afterAll, describe, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { childOf, treeViolations } from '../crash/agent-tree.js';
import { killAllChildren, REPO_ROOT, spawnTs } from '../crash/child-util.js';
import { collect } from '../helpers/drafts.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';

// agentTool on a real PostgreSQL server: the agent tree of test/crash/agent-tree.ts (an
// orchestrator, two parallel researcher sub-agents, each writing a ledger entry) in real
// processes, SIGKILLed in the hand-over; the next process recovers the open agent calls.

const CHILD = join(REPO_ROOT, 'test/crash/agent-tree-child.ts');
const cleanups: (() => Promise<void>)[] = [];
// the two cases run concurrently, each on its own schema and ledger: children are killed after both
afterAll(async () => {
  await killAllChildren();
  for (const c of cleanups.splice(0).reverse()) await c();
});

const db = await postgresForTests('agentTool on PostgreSQL');
if (db) {
  describe('agentTool on PostgreSQL (real server, real processes)', () => {
    const setup = () => {
      const dir = tempDir('actorloop-agent-pg-');
      cleanups.push(() => dir.cleanup());
      const spec = `pg:${db.url}#${freshSchema('agents')}`;
      const store = postgresStore({ connectionString: db.url, schema: spec.split('#')[1]!, maxConnections: 3 });
      cleanups.push(() => store.close());
      const life = (killAt: string) => spawnTs(CHILD, [dir.path, killAt, spec], { label: `agent-tree-child ${killAt} (pg)` });
      return { dir: dir.path, store, life };
    };
    const log = (store: ReturnType<typeof postgresStore>, id: string): Promise<EventRecord[]> => collect(store.readEvents(id));

    it.concurrent("a process killed after a child settled, before its parent committed: the next takes the child's answer once, without running the child again", async ({
      expect,
    }) => {
      const { dir, store, life } = setup();
      const first = life('child-end');
      expect((await first.waitExit(120_000)).signal, first.describe()).toBe('SIGKILL');
      expect(first.lines).toContain('KILL child-end');
      // the child that settled first: its log as the killed process left it
      const settled = [];
      for (const c of ['c1', 'c2']) {
        const l = await log(store, childOf(c));
        if (l.some((e) => e.type === 'run/end' && e.payload.status === 'succeeded')) settled.push({ id: childOf(c), length: l.length });
      }
      // (the other child, running concurrently on its own connection, may have settled in the same instant)
      expect(settled.length).toBeGreaterThanOrEqual(1);
      const last = life('none');
      await last.waitExit(120_000);
      expect(last.lines, last.describe()).toContain('DONE');
      const result = JSON.parse(last.lines.find((l) => l.startsWith('RESULT '))!.slice('RESULT '.length));
      expect(result).toMatchObject({ status: 'succeeded', uncertainCalls: [] });
      // (the other child, killed as it ran, may name its ledger call left uncertain)
      expect(result.finalMessage).toMatch(/^summary: noted alpha.*\| noted beta/);
      // taken from the child's log: nothing of a settled child ran again (its log gained only the re-opening's session/attached)
      for (const c of settled) expect((await log(store, c.id)).slice(c.length).map((e) => e.type)).toEqual(['session/attached']);
      expect(await treeViolations(store, join(dir, 'ledger'))).toEqual([]);
    }, 240_000);

    it.concurrent("a process killed while a child ran: the next continues the child's open run and commits its answer once", async ({
      expect,
    }) => {
      const { dir, store, life } = setup();
      const first = life('child-intent');
      expect((await first.waitExit(120_000)).signal, first.describe()).toBe('SIGKILL');
      const last = life('none');
      await last.waitExit(120_000);
      expect(last.lines, last.describe()).toContain('DONE');
      const result = JSON.parse(last.lines.find((l) => l.startsWith('RESULT '))!.slice('RESULT '.length));
      expect(result).toMatchObject({ status: 'succeeded', uncertainCalls: [] });
      // the child killed between its ledger call's intent and effect reports it uncertain, named in the parent's result
      expect(result.finalMessage).toMatch(/^summary: noted alpha.*left uncertain by a crash: ledger l1/);
      const kinds = (await log(store, childOf('c1'))).filter((e) => e.type === 'run/start').map((e) => e.payload.kind);
      expect(kinds).toEqual(['prompt', 'continue']);
      expect(await treeViolations(store, join(dir, 'ledger'))).toEqual([]);
    }, 240_000);
  });
}
