#!/usr/bin/env node
/**
 * The `actorloop` command. Subcommands arrive with the run engine (demo) and the CLI issue.
 */
const [, , command] = process.argv;
const known = ['demo', 'sessions', 'log', 'tail', 'recover', 'view'];
if (!command || command === '--help' || command === '-h') {
  console.log(`usage: actorloop <command>\n\ncommands (in progress): ${known.join(', ')}`);
  process.exit(0);
}
if (known.includes(command)) {
  console.error(`actorloop ${command}: not available yet in this version (the run engine is still being built).`);
  process.exit(2);
}
console.error(`actorloop: unknown command ${JSON.stringify(command)}; try actorloop --help`);
process.exit(2);
