// `npm run bench:peers [-- --quick] [-- --only=row,row]`: installs bench/peers' own dependencies
// when they are missing (npm ci there; they are never the package's), brings dist/ up to date
// (`npm run build`, incremental: a second when nothing changed; the actorloop rows import the
// built package, as an app does), then runs run.ts.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = dirname(dirname(here));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const step = (what, cmd, args, cwd) => {
  console.error(`bench:peers: ${what} …`);
  const r = spawnSync(cmd, args, { cwd, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
if (!existsSync(join(here, 'node_modules', '.package-lock.json')))
  step('installing bench/peers dependencies (npm ci)', npm, ['ci', '--no-audit', '--no-fund'], here);
step('bringing dist/ up to date (npm run build)', npm, ['run', '--silent', 'build'], repo);
const r = spawnSync(process.execPath, ['--import', 'tsx', join(here, 'run.ts'), ...process.argv.slice(2)], { cwd: here, stdio: 'inherit' });
process.exit(r.status ?? 1);
