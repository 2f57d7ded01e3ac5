import { execFile } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../crash/child-util.js';
import { scaled } from '../helpers/load.js';
import { tempDir } from '../helpers/tmp.js';

const run = promisify(execFile);
const dir = tempDir('actorloop-pack-');
afterAll(async () => {
  await dir.cleanup();
});

const NPM = process.env.npm_execpath?.endsWith('npm-cli.js') ? [process.execPath, process.env.npm_execpath] : ['npm'];
const npm = (args: string[], cwd: string) =>
  run(NPM[0]!, [...NPM.slice(1), ...args], {
    cwd,
    env: { ...process.env, npm_config_update_notifier: 'false', ACTORLOOP_DEMO_PACE: '0.01' },
    maxBuffer: 64 << 20,
  });
const versionOf = (name: string) =>
  (JSON.parse(readFileSync(join(REPO_ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;

/** The optional packages (peer dependencies and the ones other features load on demand). */
const OPTIONAL = ['openai', '@anthropic-ai/sdk', 'pg', '@modelcontextprotocol/sdk', '@opentelemetry/api', '@statelyai/inspect'];
/** What no published declaration may import: the optional packages, and undici-types (Node's fetch types, not a dependency of actorloop). */
const NOT_IMPORTED = [...OPTIONAL, 'undici-types'];

describe('the packed package installs into an app with only openai and zod', () => {
  it(
    'npm pack → npm install: an .mjs agent runs, a .cjs file require()s the same build, a .ts file type-checks with skipLibCheck: false',
    async () => {
      const { stdout } = await npm(['pack', '--json', '--pack-destination', dir.path], REPO_ROOT);
      const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
      const paths = packed!.files.map((f) => f.path);
      expect(paths).toContain('dist/index.js');
      expect(paths).toContain('dist/index.d.ts');
      expect(paths).not.toContain('dist/.tsbuildinfo');

      const app = join(dir.path, 'app');
      cpSync(join(REPO_ROOT, 'test/packaging/app'), app, { recursive: true });
      writeFileSync(
        join(app, 'package.json'),
        JSON.stringify({ name: 'an-app', private: true, type: 'module', allowScripts: { lmdb: true, 'msgpackr-extract': true } }),
      );
      // from the local npm cache where it holds them (npm ci filled it); the same versions as this repo's
      const deps = [
        join(dir.path, packed!.filename),
        `openai@${versionOf('openai')}`,
        `zod@${versionOf('zod')}`,
        `@types/node@${versionOf('@types/node')}`,
      ];
      await npm(['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', ...deps], app);
      const installed = readdirSync(join(app, 'node_modules')).flatMap((n) =>
        n.startsWith('@') ? readdirSync(join(app, 'node_modules', n)).map((m) => `${n}/${m}`) : [n],
      );
      for (const name of OPTIONAL.filter((n) => n !== 'openai')) expect(installed, name).not.toContain(name);

      const agent = await run(process.execPath, ['agent.mjs', join(dir.path, 'data')], { cwd: app });
      expect(agent.stdout.trim()).toBe('completed The answer is 42.');

      const required = await run(process.execPath, ['require.cjs'], { cwd: app });
      expect(JSON.parse(required.stdout)).toEqual({ same: true, outcome: 'completed', finalMessage: 'hello from require', typed: true });

      const tsc = createRequire(join(REPO_ROOT, 'package.json')).resolve('typescript/bin/tsc');
      const checked = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: app }).catch((e: { stdout: string }) => e);
      expect(checked.stdout).toBe('');
    },
    scaled(300_000),
  );
});

describe('npx actorloop in the clone', () => {
  // npx installs the clone's own directory into its cache and runs `prepare` there again: with an
  // up-to-date dist/ that build is a no-op (scripts/build.mjs, tsc -b), not a silent minute.
  it(
    'the first npx run (an empty npx cache) does not compile dist/ again, and its resume hint is an npx command that runs',
    async () => {
      const stamp = () => ['dist/index.js', 'dist/.tsbuildinfo'].map((f) => statSync(join(REPO_ROOT, f)).mtimeMs);
      await npm(['run', 'build'], REPO_ROOT); // a no-op when dist/ is current (the pack above built it)
      const before = stamp();
      const data = join(dir.path, 'npx-data');
      const npx = (args: string[]) => npm(['exec', '--yes', '--cache', join(dir.path, 'npx-cache'), '--', 'actorloop', ...args], REPO_ROOT);
      const first = await npx(['demo', '--provider', 'scripted', '--data', data]);
      expect(stamp()).toEqual(before);
      const hint = /resume or continue it later with: (.+)$/m.exec(first.stdout)?.[1];
      expect(hint).toMatch(/^npx actorloop demo --session demo-\S+ --data /);
      expect(first.stdout).toMatch(/^outcome: completed/m);
      const again = await npx(hint!.split(' ').slice(2));
      expect(again.stdout).toContain('recovery found: nothing to resume');
    },
    scaled(240_000),
  );
});

describe('the published declarations name no optional package', () => {
  it('no .d.ts under dist/ imports openai, @anthropic-ai/sdk, pg, the MCP SDK, @opentelemetry/api or undici-types', () => {
    const offenders: string[] = [];
    const walk = (d: string): void => {
      for (const e of readdirSync(d, { withFileTypes: true })) {
        const p = join(d, e.name);
        if (e.isDirectory()) walk(p);
        else if (p.endsWith('.d.ts')) {
          const code = readFileSync(p, 'utf8')
            .replace(/\/\*[\s\S]*?\*\//g, '')
            .replace(/\/\/.*$/gm, '');
          for (const name of NOT_IMPORTED) {
            const quoted = `['"]${name.replace(/[/.]/g, '\\$&')}(/[^'"]*)?['"]`;
            if (new RegExp(`(from|import\\(|require\\()\\s*${quoted}`).test(code))
              offenders.push(`${p.slice(REPO_ROOT.length + 1)}: ${name}`);
          }
        }
      }
    };
    walk(join(REPO_ROOT, 'dist'));
    expect(offenders).toEqual([]);
  });
});
