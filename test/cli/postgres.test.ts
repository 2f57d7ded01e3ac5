import { readdirSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { demoPaths } from '../../src/cli/demo-tools.js';
import { postgresStore } from '../../src/index.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { collect } from '../helpers/drafts.js';
import { createTestDatabase, postgresForTests } from '../helpers/postgres.js';
import { runCli } from '../../src/cli/program.js';
import { tempDir } from '../helpers/tmp.js';
import { SCHEMA_VERSION_PG } from '../../src/persistence/postgres/schema.js';

/**
 * The CLI on a PostgreSQL log: the demo killed mid-deploy and resumed by another process with
 * `--session` (the same outcome as on LMDB), the read commands with `--postgres` or
 * ACTORLOOP_DATABASE_URL, and `actorloop migrate` for stores opened with `migrate: false`.
 */
process.env.ACTORLOOP_DEMO_PACE = '0.5';
const CLI = 'src/cli/main.ts';

const db = await postgresForTests('actorloop CLI on PostgreSQL');
if (db) {
  const dirs: ReturnType<typeof tempDir>[] = [];
  afterEach(async () => {
    await killAllChildren();
    for (const d of dirs.splice(0)) await d.cleanup();
  });
  const run = async (args: string[], env: NodeJS.ProcessEnv = {}) => {
    const saved = { ...process.env };
    Object.assign(process.env, env);
    const child = spawnTs(CLI, args, { label: `actorloop ${args.join(' ')}` });
    process.env = saved;
    const exit = await child.waitExit(60_000);
    return { code: exit.code, out: child.lines.join('\n'), err: child.stderr, child };
  };

  describe('actorloop CLI on PostgreSQL', () => {
    it('the demo killed (SIGKILL) mid-deploy is resumed by another process to completion, deploying once', async () => {
      const dir = tempDir('actorloop-pg-demo-');
      dirs.push(dir);
      const args = ['demo', '--postgres', db.url, '--data', dir.path, '--session', 'pg1', '--provider', 'scripted'];
      const first = spawnTs(CLI, args, { label: 'demo on postgres (killed mid-deploy)' });
      await first.waitFor((l) => l.includes('tool start deploy c2_0 [exclusive]'), 30_000, 'the deploy to start');
      first.signal('SIGKILL');
      expect((await first.exited).signal).toBe('SIGKILL');

      const second = await run(args);
      expect(second.code, second.child.describe()).toBe(0);
      expect(second.out).toContain('recovery found: 1 interrupted run');
      expect(second.out).toContain('tool call without a result: deploy c2_0 [exclusive] → reconcile');
      expect(second.out).toMatch(/continuing run r-\S+ with a new attempt/);
      expect(second.out).toMatch(/^outcome: completed \(status succeeded/m);

      const store = postgresStore({ connectionString: db.url });
      const events = await collect(store.readEvents('pg1'));
      await store.close();
      expect(events.filter((e) => e.type === 'run/start').map((e) => e.payload.kind)).toEqual(['prompt', 'continue']);
      const results = events
        .filter((e) => e.type === 'tool/result' && e.payload.name === 'deploy')
        .map((e) => [e.payload.callId, (e.payload.outcome as { kind: string }).kind]);
      expect(results).toEqual([
        ['c2_0', 'cancelled'],
        ['c3_0', 'completed'],
      ]);
      const { deployments } = demoPaths(dir.path);
      const statuses = readdirSync(deployments).map((f) => JSON.parse(readFileSync(join(deployments, f), 'utf8')).status as string);
      expect(statuses.sort()).toEqual(['done', 'started']);

      // the read commands, by flag and by ACTORLOOP_DATABASE_URL
      const sessions = await run(['sessions', '--json', '--postgres', db.url]);
      expect(sessions.code, sessions.err).toBe(0);
      expect(JSON.parse(sessions.out)).toMatchObject([{ sessionId: 'pg1', events: events.length, openRun: null }]);
      const log = await run(['log', 'pg1', '--json'], { ACTORLOOP_DATABASE_URL: db.url });
      expect(log.code, log.err).toBe(0);
      expect(log.out.split('\n').map((l) => JSON.parse(l).seq)).toEqual(events.map((e) => e.seq));
      const out = join(dir.path, 'pg1.html');
      const view = await run(['view', 'pg1', '--postgres', db.url, '-o', out]);
      expect(view.code, view.err).toBe(0);
      expect(readFileSync(out, 'utf8')).toContain('pg1');
      const tail = spawnTs(CLI, ['tail', 'pg1', '--postgres', db.url], { label: 'tail on postgres' });
      await tail.waitFor((l) => /run\/end/.test(l), 30_000, 'the last events');
      tail.signal('SIGINT');
      expect((await tail.waitExit(10_000)).code, tail.describe()).toBe(0);
      const unknown = await run(['log', 'nobody', '--postgres', db.url]);
      expect(unknown.code).toBe(4);
      expect(unknown.err).toContain('actorloop sessions --postgres');
    }, 120_000);

    it('read commands never create a schema; migrate does, once, and a store with migrate: false then opens', async () => {
      const bare = postgresStore({ connectionString: db.url, schema: 'unmigrated', migrate: false });
      await expect(bare.listSessions()).rejects.toThrow(/version 0.*actorloop migrate --postgres/);
      await bare.close();
      const m1 = await run(['migrate', '--postgres', db.url, '--schema', 'unmigrated']);
      expect(m1.code, m1.err).toBe(0);
      expect(m1.out).toContain(`migrated from version 0 to ${SCHEMA_VERSION_PG}`);
      const m2 = await run(['migrate', '--postgres', db.url, '--schema', 'unmigrated']);
      expect(m2.out).toContain(`is at version ${SCHEMA_VERSION_PG}: nothing to do`);
      const ok = postgresStore({ connectionString: db.url, schema: 'unmigrated', migrate: false });
      expect(await ok.listSessions()).toEqual([]);
      await ok.close();
      const usage = await run(['migrate']);
      expect(usage.code).toBe(2);
    }, 60_000);

    it('an unknown database and a database without actorloop tables exit 4, as an unknown session does; the migrate hint names the database given', async () => {
      const here = async (args: string[], env: NodeJS.ProcessEnv = {}) => {
        let out = '';
        let err = '';
        const sink = (f: (s: string) => void) => ({ write: (s: string) => (f(s), true) });
        const code = await runCli(['node', 'actorloop', ...args], {
          out: sink((s) => (out += s)),
          err: sink((s) => (err += s)),
          onInterrupt: () => () => {},
          tty: false,
          env,
          exitNow: () => {},
        });
        return { code, out, err };
      };
      const missing = new URL(db.url);
      missing.pathname = '/actorloop_no_such_database';
      for (const args of [['sessions'], ['log', 's1'], ['migrate']]) {
        const r = await here([...args, '--postgres', missing.toString()]);
        expect([r.code, r.err]).toEqual([
          4,
          `actorloop: no database "actorloop_no_such_database" at ${missing}: create it, or name another database\n`,
        ]);
      }
      const empty = await createTestDatabase(new URL('/postgres', db.url).toString());
      const withPassword = new URL(empty.url);
      withPassword.password = 'secret';
      const bare = await here(['log', 's1', '--postgres', withPassword.toString()]);
      expect(bare.code).toBe(4);
      const hidden = withPassword.toString().replace(':secret@', ':***@');
      expect(bare.err).toBe(
        `actorloop: no actorloop tables in schema "actorloop" of ${hidden}: run \`npx actorloop migrate --postgres ${hidden}\` to create them (the demo creates them on first use)\n`,
      );
      const byEnv = await here(['sessions'], { ACTORLOOP_DATABASE_URL: empty.url });
      expect([byEnv.code, byEnv.err]).toEqual([4, expect.stringContaining('run `npx actorloop migrate` to create them')]);
      // a schema newer than this actorloop: exit 3, as a log written by a newer schema version
      expect((await here(['migrate', '--postgres', empty.url])).code).toBe(0);
      const admin = new pg.Client({ connectionString: empty.url });
      await admin.connect();
      await admin.query('INSERT INTO actorloop.actorloop_schema (version) VALUES (99)');
      await admin.end();
      for (const args of [['sessions'], ['migrate']]) {
        const newer = await here([...args, '--postgres', empty.url]);
        expect([newer.code, newer.err]).toEqual([3, expect.stringContaining('is at version 99')]);
      }
      await empty.drop();
    }, 60_000);
  });
}
