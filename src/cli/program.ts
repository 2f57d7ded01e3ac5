import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { logCommand, sessionsCommand, tailCommand, viewCommand, type CommandIO } from './commands.js';
import { recoverCommand } from './recover-command.js';
import { migrateCommand } from './migrate.js';
import { explainPostgresFailure, type PostgresTarget } from './postgres-failure.js';
import { DEFAULT_DATA_DIR, PostgresUrl } from './data.js';
import { Provider } from './demo-agent.js';
import { runDemo } from './demo.js';
import { CliError, DATABASE_URL_ENV, EXIT, describeFailure, parseArg } from './errors.js';
import { repairCommand, verifyCommand } from './store-commands.js';
import { webCommand } from './web.js';
import { workersCommand } from './workers.js';
import { commandPrefix, runnable, setCommandPrefix } from './invocation.js';

const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** Everything a command touches of its process: output, Ctrl-C, the terminal, the environment. */
export interface CliIO extends CommandIO {
  tty: boolean;
  env: NodeJS.ProcessEnv;
  /** The node options the command was started with (default process.execArgv), for runnable hints. */
  execArgv?: readonly string[];
  /** Leaves at once (the demo's second Ctrl-C). */
  exitNow(code: number): void;
}

// the default is in the words, not the Option: an unset --data lets ACTORLOOP_DATABASE_URL name the log
const dataOption = () => new Option('-d, --data <dir>', `data dir (the LMDB event log; default: ${DEFAULT_DATA_DIR})`);
const postgresOption = () =>
  new Option(
    '--postgres <url>',
    `the PostgreSQL event log instead of a data dir (default: $${DATABASE_URL_ENV} when set and --data is not given)`,
  );
/** `migrate` works on PostgreSQL only: no data dir to name or to fall back to. */
const migratePostgresOption = () => new Option('--postgres <url>', `the PostgreSQL database (default: $${DATABASE_URL_ENV})`);

/**
 * ACTORLOOP_DATABASE_URL, checked: a bad value is refused naming the variable (its password shown
 * as `***`), as a bad `--postgres` is named by the flag.
 */
const databaseUrlEnv = (env: NodeJS.ProcessEnv): string | undefined =>
  env[DATABASE_URL_ENV] ? parseArg(PostgresUrl, env[DATABASE_URL_ENV], DATABASE_URL_ENV) : undefined;

/** `--postgres`, else ACTORLOOP_DATABASE_URL unless `--data` names a data dir. */
function withDatabase<T extends { data?: string; postgres?: string }>(opts: T, env: NodeJS.ProcessEnv): T {
  const url = opts.postgres === undefined && opts.data === undefined ? databaseUrlEnv(env) : undefined;
  return url === undefined ? opts : { ...opts, postgres: url };
}

type LogOptions = { data?: string; postgres?: string; from?: string; follow?: boolean; json?: boolean };
type WebFlags = {
  port: string;
  host: string;
  allowedHost?: string[];
  data?: string;
  postgres?: string;
  provider?: Provider;
  leaseMs: string;
};

/**
 * `log` and `tail` take one session, and `-f` is `--follow`: `tail s -f 12` (`-f` read as a short
 * `--from`) is refused naming the flag to use, not read as a second session.
 */
async function refuseOldFrom(args: readonly string[]): Promise<void> {
  if (args.length <= 1) return;
  const seq = args.find((a) => /^\d+$/.test(a));
  throw new CliError(
    seq !== undefined
      ? `-f is --follow; to start at seq ${seq}, pass --from ${seq}`
      : `one session at a time (got ${args.map((a) => JSON.stringify(a)).join(', ')})`,
    EXIT.usage,
  );
}

/** Builds the command tree; each action hands its exit code's promise to `run`. */
export function buildProgram(io: CliIO, run: (code: Promise<number>) => void): Command {
  const program = new Command('actorloop')
    .description('Durable LLM agent loops as XState actors over an append-only event log.')
    .version(version)
    .exitOverride()
    .configureOutput({
      writeOut: (s) => void io.out.write(s),
      writeErr: (s) => void io.err.write(s),
      // docs/cli.md: an error is one line on stderr starting with `actorloop:`
      outputError: (s, write) =>
        write(
          `actorloop: ${s
            .replace(/^error: /, '')
            .trim()
            .replace(/\s*\n\s*/g, ' ')} (actorloop --help lists the commands)\n`,
        ),
    });

  /** Runs a command on the log `opts` names; a failure on PostgreSQL gets the CLI's exit code for it (postgres-failure.ts). */
  const runOn = (raw: { postgres?: string }, opts: { postgres?: string; schema?: string }, code: Promise<number>) => {
    if (opts.postgres === undefined) return run(code);
    const target: PostgresTarget = { url: opts.postgres, fromEnv: raw.postgres === undefined };
    if (opts.schema) target.schema = opts.schema;
    run(code.catch(async (e: unknown) => Promise.reject(await explainPostgresFailure(e, target))));
  };

  program
    .command('demo')
    .description('run the demo agent (offline unless an API key is set); --session resumes or continues a session')
    .option('-s, --session <id>', 'session id (default: a new demo-<time> id); an existing session is resumed')
    .addOption(dataOption())
    .addOption(postgresOption())
    .addOption(
      new Option('-p, --provider <name>', 'model provider (default: openai or anthropic when its API key is set, else scripted)').choices(
        Provider.options,
      ),
    )
    .action((raw: { session?: string; data?: string; postgres?: string; provider?: Provider }) => {
      // the demo keeps its tools' files in the data dir even when its log is in PostgreSQL
      const opts = withDatabase(raw, io.env);
      const pace = io.env.ACTORLOOP_DEMO_PACE; // checked by runDemo, named in its error
      runOn(
        raw,
        opts,
        runDemo(
          { ...opts, ...(pace ? { pace } : {}) },
          { out: io.out, tty: io.tty, color: io.tty && !io.env.NO_COLOR, onInterrupt: io.onInterrupt, exitNow: io.exitNow },
        ),
      );
    });

  program
    .command('web')
    .description('serve the example chat page on the demo agent (its deploy needs an approval); the page survives server restarts')
    .option('--port <n>', 'port (0: any free one)', '8787')
    .option('--host <host>', 'loopback interface to listen on (127.0.0.1, ::1, localhost)', '127.0.0.1')
    .option('--allowed-host <host...>', 'a Host header served besides localhost, 127.0.0.1 and [::1] (e.g. my-box:8787)')
    .addOption(dataOption())
    .addOption(postgresOption())
    .addOption(
      new Option('-p, --provider <name>', 'model provider (default: openai or anthropic when its API key is set, else scripted)').choices(
        Provider.options,
      ),
    )
    .option('--lease-ms <ms>', "the worker's session lease: how soon a restarted server takes over a killed one's sessions", '5000')
    .action(({ allowedHost, ...raw }: WebFlags) => {
      const pace = io.env.ACTORLOOP_DEMO_PACE;
      const opts = withDatabase(raw, io.env);
      const extra = { ...(allowedHost ? { allowedHosts: allowedHost } : {}), ...(pace ? { pace } : {}) };
      runOn(raw, opts, webCommand({ ...opts, ...extra }, { out: io.out, onInterrupt: io.onInterrupt }));
    });

  program
    .command('sessions')
    .description('list the sessions of a data dir')
    .addOption(dataOption())
    .addOption(postgresOption())
    .option('--json', 'one JSON array')
    .action((raw: { data?: string; postgres?: string; json?: boolean }) => {
      const opts = withDatabase(raw, io.env);
      runOn(raw, opts, sessionsCommand(opts, io));
    });

  program
    .command('workers')
    .description('list the serving workers (runtime.serve), their leases and the sessions with work waiting')
    .addOption(dataOption())
    .addOption(postgresOption())
    .option('--json', 'one JSON object { workers, leases }')
    .option('--all', 'also the workers gone (no heartbeat) for more than an hour')
    .action((raw: { data?: string; postgres?: string; json?: boolean; all?: boolean }) => {
      const opts = withDatabase(raw, io.env);
      runOn(raw, opts, workersCommand(opts, io));
    });

  program
    .command('log')
    .description("print a session's event log")
    .argument('<session>', 'session id')
    .addOption(dataOption())
    .addOption(postgresOption())
    .option('--from <seq>', 'first seq to print (default 1)')
    .option('-f, --follow', 'then follow appends by any process, as tail does (Ctrl-C stops)')
    .option('--json', 'one JSON record per line')
    .allowExcessArguments()
    .action((session: string, raw: LogOptions, cmd: Command) => {
      const opts = withDatabase(raw, io.env);
      const print = () => (opts.follow ? tailCommand(session, { ...opts, from: opts.from ?? '1' }, io) : logCommand(session, opts, io));
      runOn(raw, opts, refuseOldFrom(cmd.args).then(print));
    });

  program
    .command('tail')
    .description('print the last events of a session, then follow appends by any process (Ctrl-C stops)')
    .argument('<session>', 'session id')
    .addOption(dataOption())
    .addOption(postgresOption())
    .option('--from <seq>', 'first seq to print (default: the last 10 events)')
    .option('-f, --follow', 'follow appends (tail always does; -f as in tail -f)')
    .option('--json', 'one JSON record per line')
    .allowExcessArguments()
    .action((session: string, raw: LogOptions, cmd: Command) => {
      const opts = withDatabase(raw, io.env);
      runOn(
        raw,
        opts,
        refuseOldFrom(cmd.args).then(() => tailCommand(session, opts, io)),
      );
    });

  program
    .command('recover')
    .description(
      'print what recovery would find, as JSON, read from the log (read only: attaches nothing, fences no one); ' +
        '--resume takes the session over',
    )
    .argument('<session>', 'session id')
    .addOption(dataOption())
    .addOption(postgresOption())
    .option(
      '--resume',
      'open the session: attach a new writer (a process still running it is fenced) and settle what opening settles; ' +
        'runs no tool or model call',
    )
    .option('--force', "with --resume: even while a serving worker's unexpired lease holds the session")
    .action((session: string, raw: { data?: string; postgres?: string; resume?: boolean; force?: boolean }) => {
      if (raw.force && !raw.resume) {
        run(Promise.reject(new CliError('--force only goes with --resume', EXIT.usage)));
        return;
      }
      const opts = withDatabase(raw, io.env);
      runOn(raw, opts, recoverCommand(session, opts, io));
    });

  program
    .command('view')
    .description('write the session timeline as one self-contained HTML file')
    .argument('<session>', 'session id')
    .addOption(dataOption())
    .addOption(postgresOption())
    .option('-o, --output <file>', 'HTML file to write (default: <session>.timeline.html)')
    .action((session: string, raw: { data?: string; postgres?: string; output?: string }) => {
      const opts = withDatabase(raw, io.env);
      runOn(raw, opts, viewCommand(session, opts, io));
    });

  program
    .command('migrate')
    .description('create or upgrade the PostgreSQL schema (for deployments whose stores are opened with migrate: false)')
    .addOption(migratePostgresOption())
    .option('--schema <name>', 'PostgreSQL schema holding the tables', 'actorloop')
    .action((raw: { postgres?: string; schema: string }) => {
      const opts = { ...raw, postgres: raw.postgres ?? databaseUrlEnv(io.env) };
      runOn(raw, opts, migrateCommand(opts, io));
    });

  program
    .command('verify')
    .description('check every record and the journal of a data dir (in a child process); exit 3 if anything is damaged')
    .argument('[dir]', 'data dir (default ./.actorloop)')
    .option('--json', 'the report as one JSON object')
    .action((dir: string | undefined, opts: { json?: boolean }) => run(verifyCommand(dir, opts, io)));

  program
    .command('repair')
    .description('rebuild a damaged data.mdb from the journal (or a damaged journal from data.mdb); stop every process using the dir first')
    .argument('[dir]', 'data dir (default ./.actorloop)')
    .action((dir: string | undefined) => run(repairCommand(dir, io)));

  return program;
}

/**
 * Runs one command line (`argv` as in process.argv: node, script, args…) and resolves with its
 * exit code (docs/cli.md); failures are reported on `io.err` as one `actorloop: …` line.
 * @example
 * process.exitCode = await runCli(process.argv, io)
 */
export async function runCli(argv: readonly string[], io: CliIO): Promise<number> {
  let pending: Promise<number> | undefined;
  // handled at once: a command may fail before parseAsync returns
  const settle = (p: Promise<number>) =>
    p.catch((e: unknown) => {
      const { message, exitCode } = describeFailure(e);
      io.err.write(`actorloop: ${runnable(message)}\n`);
      return exitCode;
    });
  setCommandPrefix(commandPrefix({ argv, env: io.env, execArgv: io.execArgv ?? process.execArgv, cwd: process.cwd() }));
  const program = buildProgram(io, (p) => {
    pending = settle(p);
  });
  try {
    await program.parseAsync([...argv]);
  } catch (e) {
    // help and --version exit 0; every other parse error is a usage error
    if (e instanceof CommanderError) return e.exitCode === 0 ? EXIT.ok : EXIT.usage;
    // an action that threw before handing over its promise (a bad ACTORLOOP_DATABASE_URL): reported as any failure
    return settle(Promise.reject(e));
  }
  if (!pending) {
    program.outputHelp({ error: true });
    return EXIT.usage;
  }
  return pending;
}
