import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, realpathSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, resolve, sep } from 'node:path';
import { z } from 'zod';
import type { ToolOutcomeInput } from '../contracts/tools.js';
import { defineTool, type AnyTool } from '../tools/define-tool.js';
import { evaluate, formatNumber } from './calculator.js';

/** Where the demo keeps its files, beside the LMDB files in the data dir. */
export interface DemoPaths {
  /** The only folder `read_file` may read. */
  sandbox: string;
  /** One JSON record per deploy idempotency key. */
  deployments: string;
}

export function demoPaths(dataDir: string): DemoPaths {
  return { sandbox: join(dataDir, 'demo-sandbox'), deployments: join(dataDir, 'demo-deployments') };
}

const SERVICE = { service: 'checkout', pods: 40, canaryShare: 0.1, environments: ['staging', 'production'] };
const SANDBOX_FILES: Record<string, string> = {
  'release-notes.md': [
    '# checkout 2.4.0',
    '',
    '- Faster cart totals (p95 -35 ms).',
    '- Retries card authorisation once on a gateway timeout.',
    '- SLO unchanged: 99.9% of requests succeed over 30 days.',
    '',
  ].join('\n'),
  'service.json': `${JSON.stringify(SERVICE, null, 2)}\n`,
};

/** Creates the sandbox with its sample files (kept if they exist) and the deployments folder. */
export function prepareDemoFiles(paths: DemoPaths): void {
  mkdirSync(paths.sandbox, { recursive: true, mode: 0o700 });
  mkdirSync(paths.deployments, { recursive: true, mode: 0o700 });
  for (const [name, text] of Object.entries(SANDBOX_FILES)) {
    const file = join(paths.sandbox, name);
    if (!existsSync(file)) writeFileSync(file, text, { mode: 0o600 });
  }
}

/** Waits `ms`, rejecting with the signal's reason as soon as it aborts. */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((res, rej) => {
    if (signal.aborted) return rej(signal.reason ?? new Error('aborted'));
    const onAbort = () => {
      clearTimeout(t);
      rej(signal.reason ?? new Error('aborted'));
    };
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      res();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Resolves `path` inside the sandbox, refusing absolute paths, `..` escapes and symlinks out. */
export function sandboxed(sandbox: string, path: string): string {
  if (isAbsolute(path)) throw new Error(`${path}: absolute paths are not allowed; give a path relative to the sandbox`);
  const root = realpathSync(sandbox);
  const target = resolve(root, path);
  const inside = (p: string) => p === root || p.startsWith(root + sep);
  if (!inside(target)) throw new Error(`${path}: outside the sandbox`);
  if (!existsSync(target)) throw new Error(`${path}: no such file in the sandbox`);
  const real = realpathSync(target);
  if (!inside(real)) throw new Error(`${path}: links outside the sandbox`);
  return real;
}

const DeployArgs = z.object({
  service: z.string().regex(/^[a-z0-9-]{1,40}$/, 'lowercase letters, digits and -'),
  version: z.string().regex(/^\d+\.\d+\.\d+$/, 'a version such as 2.4.0'),
  environment: z.enum(['staging', 'production']),
});
type DeployArgs = z.infer<typeof DeployArgs>;

interface DeployRecord extends DeployArgs {
  idempotencyKey: string;
  status: 'started' | 'done' | 'aborted';
  deploymentId: string;
  startedAt: string;
  finishedAt?: string;
}

const recordFile = (paths: DemoPaths, key: string) =>
  join(paths.deployments, `${createHash('sha256').update(key).digest('hex').slice(0, 32)}.json`);

function readRecord(paths: DemoPaths, key: string): DeployRecord | undefined {
  const file = recordFile(paths, key);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as DeployRecord) : undefined;
}

/** Atomic (write + rename): a reader sees the old record or the new one, never half of one. */
function writeRecord(paths: DemoPaths, r: DeployRecord): void {
  const file = recordFile(paths, r.idempotencyKey);
  writeFileSync(`${file}.tmp`, JSON.stringify(r), { mode: 0o600 });
  renameSync(`${file}.tmp`, file);
}

const doneText = (r: DeployRecord) => `deployed ${r.service} ${r.version} to ${r.environment} (deployment ${r.deploymentId})`;

/**
 * The demo agent's tools: `calculate` and `read_file` are side-effect free (`parallel`);
 * `deploy` is a slow `exclusive` step that honours its AbortSignal, uses its idempotencyKey so a
 * repeated call never deploys twice, and can `reconcile` after a crash.
 * `pace` scales every delay (1 = the demo's speed).
 */
export function demoTools(paths: DemoPaths, pace = 1): AnyTool[] {
  const wait = (ms: number, signal: AbortSignal) => abortableSleep(Math.round(ms * pace), signal);

  const calculate = defineTool({
    name: 'calculate',
    description: 'Evaluates an arithmetic expression: numbers, + - * / % ^ and parentheses.',
    parameters: z.object({ expression: z.string().min(1).describe('e.g. (1 - 0.999) * 30 * 24 * 60') }),
    mode: 'parallel',
    execute: async ({ expression }, ctx) => {
      await wait(250, ctx.signal);
      return `${expression} = ${formatNumber(evaluate(expression))}`;
    },
  });

  const readFile = defineTool({
    name: 'read_file',
    description: 'Reads a text file from the demo sandbox folder (paths relative to the sandbox; 64 KiB at most).',
    parameters: z.object({ path: z.string().min(1).describe('e.g. release-notes.md') }),
    mode: 'parallel',
    execute: async ({ path }, ctx) => {
      const file = sandboxed(paths.sandbox, path);
      if (!statSync(file).isFile()) throw new Error(`${path}: not a file`);
      if (statSync(file).size > 64 * 1024) throw new Error(`${path}: larger than 64 KiB`);
      await wait(400, ctx.signal);
      return readFileSync(file, 'utf8');
    },
  });

  const deploy = defineTool({
    name: 'deploy',
    description: 'Deploys a service version to an environment. Slow; runs alone; never deploys the same call twice.',
    parameters: DeployArgs,
    mode: 'exclusive',
    resources: (a: DeployArgs) => [`env:${a.environment}`],
    execute: async (args, ctx): Promise<string | ToolOutcomeInput> => {
      const seen = readRecord(paths, ctx.idempotencyKey);
      if (seen?.status === 'done') return `${doneText(seen)}; already done for this call, not deployed again`;
      const record: DeployRecord = {
        ...args,
        idempotencyKey: ctx.idempotencyKey,
        status: 'started',
        deploymentId: `dep-${createHash('sha256').update(ctx.idempotencyKey).digest('hex').slice(0, 8)}`,
        startedAt: new Date().toISOString(),
      };
      writeRecord(paths, record);
      try {
        for (const [i, phase] of ['building image', 'rolling out', 'switching traffic'].entries()) {
          ctx.emit({ phase, progress: `${i + 1}/3` });
          await wait(700, ctx.signal);
        }
      } catch (e) {
        writeRecord(paths, { ...record, status: 'aborted', finishedAt: new Date().toISOString() });
        throw e;
      }
      const done: DeployRecord = { ...record, status: 'done', finishedAt: new Date().toISOString() };
      writeRecord(paths, done); // the deployment takes effect here, atomically
      return doneText(done);
    },
    // After a crash: the deployment record under this call's idempotency key tells what happened.
    reconcile: (_args, ctx): ToolOutcomeInput => {
      const r = readRecord(paths, ctx.idempotencyKey);
      if (r?.status === 'done') return { kind: 'completed', content: `${doneText(r)} (confirmed by reconcile after a restart)` };
      // The simulated deploy only takes effect at its final atomic write, which never happened
      // (a deploy runs inside the process that was killed, so 'started' cannot still be running).
      return {
        kind: 'cancelled',
        settled: true,
        partialContent: 'interrupted before traffic was switched: nothing was deployed; it is safe to deploy again',
      };
    },
  });

  return [calculate, readFile, deploy];
}
