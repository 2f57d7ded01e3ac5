import { readFileSync } from 'node:fs';

/** Whether `states` passes through `expected` in this order (other states may come between). */
export function passesThrough(states: readonly string[], expected: readonly string[]): boolean {
  let i = 0;
  for (const s of states) if (s === expected[i]) i++;
  return i === expected.length;
}

/**
 * The `name: a → b → …` lines of a file's header comment (an example's "it prints" sample), each
 * as its name and states, `…` dropped.
 */
export function headerTraces(file: string): { name: string; states: string[] }[] {
  const header = readFileSync(file, 'utf8').split('*/')[0]!;
  return [...header.matchAll(/^ \* {3}([\w #]+): (.+ → .+)$/gm)].map((m) => ({
    name: m[1]!,
    states: m[2]!.split(' → ').filter((s) => s !== '…'),
  }));
}

/** stateTrace's lines (`name: a → b`) by name, each as its states. */
export const printedTraces = (lines: readonly string[]): Map<string, string[]> =>
  new Map(lines.map((l) => [l.slice(0, l.indexOf(': ')), l.slice(l.indexOf(': ') + 2).split(' → ')]));
