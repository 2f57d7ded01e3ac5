#!/usr/bin/env node
/**
 * The `actorloop` command: the offline demo agent, and tools to look into a data dir's sessions.
 * docs/cli.md documents every command and exit code; src/cli/program.ts builds them.
 */
import { runCli } from './program.js';

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
