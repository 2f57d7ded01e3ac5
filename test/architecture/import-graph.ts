import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** Every relative import of one source file (type-only ones and re-exports included), as repo-relative paths. */
export type ImportGraph = Map<string, string[]>;

const SPECIFIER = /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s*['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? sourceFiles(join(dir, d.name)) : d.name.endsWith('.ts') ? [join(dir, d.name)] : [],
  );
}

/** The import graph of the `.ts` files under `root` (paths relative to `base`). */
export function importGraph(root: string, base = process.cwd()): ImportGraph {
  const graph: ImportGraph = new Map();
  for (const file of sourceFiles(resolve(base, root))) {
    const text = readFileSync(file, 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/^\s*\/\/.*$/gm, '');
    const deps = new Set<string>();
    for (const m of text.matchAll(SPECIFIER)) deps.add(relative(base, resolve(dirname(file), (m[1] ?? m[2])!.replace(/\.js$/, '.ts'))));
    graph.set(relative(base, file), [...deps]);
  }
  return graph;
}

/** The cycles of `graph`, each as the list of files around it (one per strongly connected component). */
export function importCycles(graph: ImportGraph): string[][] {
  // Tarjan's strongly connected components
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) !== idx.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push(component.sort());
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return cycles;
}
