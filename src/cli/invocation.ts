import { accessSync, constants, realpathSync } from 'node:fs';
import { basename, delimiter, join, relative } from 'node:path';

/** How this process was started, for hints that print a command to run next. */
export interface Invocation {
  /** process.argv */
  argv: readonly string[];
  env: NodeJS.ProcessEnv;
  /** process.execArgv (`--import tsx` when run from source) */
  execArgv: readonly string[];
  cwd: string;
}

/** `arg` as a shell word: as it is when plain, else in single quotes. */
export const quote = (arg: string): string => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`);

const sameFile = (a: string, b: string): boolean => {
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return false;
  }
};

const onPath = (name: string, script: string, env: NodeJS.ProcessEnv): boolean =>
  (env.PATH ?? '').split(delimiter).some((dir) => {
    if (!dir) return false;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
    } catch {
      return false;
    }
    return sameFile(candidate, script);
  });

/**
 * The words that start the `actorloop` command the way this process was started, so a printed
 * hint can be pasted and run (docs/cli.md): `npx actorloop` under npx / npm exec or an npm script;
 * `actorloop` when that name on PATH is this program (a global install); `npx actorloop` for a
 * project's node_modules/.bin link; else node with this script's path (and `--import tsx` etc.).
 * @example
 * commandPrefix({ argv: process.argv, env: process.env, execArgv: process.execArgv, cwd: process.cwd() }) // 'npx actorloop'
 */
export function commandPrefix(at: Invocation): string {
  if (at.env.npm_command === 'exec' || at.env.npm_lifecycle_event) return 'npx actorloop';
  const script = at.argv[1];
  if (!script) return 'actorloop';
  if (basename(script) === 'actorloop') return onPath('actorloop', script, at.env) ? 'actorloop' : 'npx actorloop';
  const path = relative(at.cwd, script);
  const shown = path.startsWith('..') || path === '' ? script : path;
  return ['node', ...at.execArgv, shown].map(quote).join(' ');
}

let prefix = 'actorloop';

/** Sets the prefix `command()` uses (runCli does, once per command line). */
export function setCommandPrefix(words: string): void {
  prefix = words;
}

/**
 * A runnable `actorloop` command line for a hint: `command('sessions --data d')` is
 * `npx actorloop sessions --data d` under npx.
 * @example
 * say(`resume with: ${command(`demo --session ${id}`)}`)
 */
export const command = (args: string): string => `${prefix} ${args}`;

/**
 * `text` with each quoted \`actorloop …\` command (as the library's own messages name them, e.g.
 * "run \`actorloop repair DIR\`") started the way this process was.
 * @example
 * runnable('run `actorloop repair d`') // 'run `npx actorloop repair d`' under npx
 */
export const runnable = (text: string): string => (prefix === 'actorloop' ? text : text.replace(/`actorloop /g, `\`${prefix} `));
