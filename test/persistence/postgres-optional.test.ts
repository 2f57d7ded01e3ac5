import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * `pg` is an optional peer dependency: an app without it installed imports the package and uses
 * every other store; only opening a PostgreSQL store needs it, and says so. Simulated by a
 * module-resolution hook that makes `pg` unresolvable in a child process.
 */
describe('the package without pg installed', () => {
  const dir = tempDir('actorloop-no-pg-');
  afterAll(dir.cleanup);

  it('imports, runs on the memory store, and postgresStore names the missing package on first use', () => {
    writeFileSync(
      join(dir.path, 'hooks.mjs'),
      `export async function resolve(spec, ctx, next) {
  if (spec === 'pg' || spec.startsWith('pg/')) throw Object.assign(new Error("Cannot find package 'pg'"), { code: 'ERR_MODULE_NOT_FOUND' });
  return next(spec, ctx);
}\n`,
    );
    writeFileSync(join(dir.path, 'register.mjs'), `import { register } from 'node:module';\nregister('./hooks.mjs', import.meta.url);\n`);
    const script = join(dir.path, 'app.mts');
    writeFileSync(
      script,
      `const al = await import(${JSON.stringify(join(REPO_ROOT, 'src/index.ts'))});
const s = al.memoryStore();
const { writerEpoch } = await s.attachWriter('x');
console.log('MEMORY', writerEpoch);
const pgStore = al.postgresStore({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
try { await pgStore.listSessions(); console.log('NO ERROR'); } catch (e) { console.log('REFUSED', e.name, e.message); }
await pgStore.close();
`,
    );
    const r = spawnSync(process.execPath, ['--import', join(dir.path, 'register.mjs'), '--import', 'tsx', script], {
      cwd: REPO_ROOT,
      encoding: 'utf8',
      env: { ...process.env, NODE_OPTIONS: '' },
      timeout: 60_000,
    });
    expect(r.stdout, r.stderr).toContain('MEMORY 1');
    expect(r.stdout).toMatch(/REFUSED StoreUnavailableError postgresStore needs the 'pg' package: npm install pg/);
  });
});
