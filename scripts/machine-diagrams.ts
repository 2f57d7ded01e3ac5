/**
 * Writes the Mermaid diagram of each machine into docs/architecture.md, between its markers
 * (`<!-- machine:<name>:start -->` … `<!-- machine:<name>:end -->`), from the machine
 * definitions themselves. test/machines/diagrams.test.ts fails when the docs and the machines
 * differ.
 *
 *   npm run diagrams
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { AnyStateMachine } from 'xstate';
import { heldSessionMachine } from '../src/machines/held-session.machine.js';
import { runMachine } from '../src/machines/run.machine.js';
import { sessionMachine } from '../src/machines/session.machine.js';
import { toolBatchMachine } from '../src/machines/tool-batch.machine.js';
import { workerMachine } from '../src/machines/worker.machine.js';
import { machineDiagram } from './state-diagram.js';

/** The machines drawn in the docs, by marker name. */
export const DIAGRAMS: Record<string, AnyStateMachine> = {
  session: sessionMachine,
  run: runMachine,
  toolBatch: toolBatchMachine,
  worker: workerMachine,
  heldSession: heldSessionMachine,
};

export const ARCHITECTURE_MD = fileURLToPath(new URL('../docs/architecture.md', import.meta.url));

const markers = (name: string) => [`<!-- machine:${name}:start -->`, `<!-- machine:${name}:end -->`] as const;

/** What goes between a machine's markers: its diagram in a mermaid fence. */
export function diagramBlock(machine: AnyStateMachine): string {
  return `\n\`\`\`mermaid\n${machineDiagram(machine)}\`\`\`\n`;
}

/** The text between a machine's markers in `doc` (undefined when its markers are missing). */
export function blockIn(doc: string, name: string): string | undefined {
  const [start, end] = markers(name);
  const from = doc.indexOf(start);
  const to = doc.indexOf(end, from);
  return from < 0 || to < 0 ? undefined : doc.slice(from + start.length, to);
}

/** `doc` with every machine's block regenerated. Throws when a machine's markers are missing. */
export function withDiagrams(doc: string, diagrams: Record<string, AnyStateMachine> = DIAGRAMS): string {
  let out = doc;
  for (const [name, machine] of Object.entries(diagrams)) {
    const [start, end] = markers(name);
    if (blockIn(out, name) === undefined) throw new Error(`docs/architecture.md has no ${start} … ${end} markers`);
    const from = out.indexOf(start) + start.length;
    out = out.slice(0, from) + diagramBlock(machine) + out.slice(out.indexOf(end, from));
  }
  return out;
}

function main(): void {
  const doc = readFileSync(ARCHITECTURE_MD, 'utf8');
  const next = withDiagrams(doc);
  if (next === doc) console.log('docs/architecture.md: the machine diagrams are up to date');
  else {
    writeFileSync(ARCHITECTURE_MD, next);
    console.log(`docs/architecture.md: wrote the diagrams of ${Object.keys(DIAGRAMS).join(', ')}`);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
