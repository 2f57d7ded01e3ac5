#!/usr/bin/env node
/**
 * The `actorloop` command: the offline demo agent, and tools to look into a data dir's sessions.
 * docs/cli.md documents every command and exit code; src/cli/program.ts builds them.
 */
import { runCli } from './program.js';

// A reader that stops early (`actorloop log s | head`) closes the pipe: end quietly, as Unix
// tools do, instead of an unhandled EPIPE with a stack trace. A run in progress stays resumable.
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(0);
  process.stderr.write(`actorloop: cannot write to standard output: ${e.message}\n`);
  process.exit(1);
});

const code = await runCli(process.argv, {
  out: process.stdout,
  err: process.stderr,
  tty: Boolean(process.stdout.isTTY),
  env: process.env,
  onInterrupt: (handler) => {
    process.on('SIGINT', handler);
    return () => void process.off('SIGINT', handler);
  },
  exitNow: (code) => process.exit(code),
});
// flush what is buffered, then leave even if a handle (a timer, a socket) is still open
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
process.exit(code);
