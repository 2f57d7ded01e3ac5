// Builds dist/ with `tsc -b` (incremental: an up-to-date dist/ takes a second, so the `prepare`
// that `npx actorloop` runs on the clone's own directory does not compile everything again).
// A dist/ that lost its entry points is rebuilt from scratch. See docs/packaging.md.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';

const outputs = ['dist/index.js', 'dist/index.d.ts', 'dist/cli/main.js'];
if (!outputs.every((f) => existsSync(f))) rmSync('dist/.tsbuildinfo', { force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
process.stderr.write('actorloop: building dist/ (tsc -b; up to date in a second) …\n');
const r = spawnSync(process.execPath, [tsc, '-b', 'tsconfig.build.json', ...process.argv.slice(2)], { stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);
chmodSync('dist/cli/main.js', 0o755);
// the browser bundle of actorloop/client that examples/web serves (esbuild: a dev dependency; an
// install from the registry or a tarball ships dist/ already built)
let esbuild;
try {
  esbuild = createRequire(import.meta.url)('esbuild');
} catch {
  esbuild = undefined;
}
if (esbuild) {
  esbuild.buildSync({
    entryPoints: ['src/web/client.ts'],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    minify: true,
    logLevel: 'warning',
    outfile: 'dist/web/client.browser.js',
  });
}
