import { describe, expect, it } from 'vitest';
import { importCycles, importGraph, type ImportGraph } from './import-graph.js';

/** What each layer of src/ may import (docs/architecture.md, "Layers"). */
const ALLOWED: Record<string, readonly string[]> = {
  contracts: ['contracts'],
  persistence: ['contracts', 'persistence'],
  tools: ['contracts', 'tools'],
  providers: ['contracts', 'providers'],
  streams: ['contracts', 'streams'],
  actors: ['contracts', 'persistence', 'tools', 'providers', 'streams', 'actors'],
  machines: ['contracts', 'persistence', 'tools', 'streams', 'actors', 'machines'],
  runtime: ['contracts', 'persistence', 'tools', 'providers', 'streams', 'actors', 'machines', 'runtime'],
  web: ['contracts', 'persistence', 'streams', 'runtime', 'web'],
};

const layerOf = (file: string) => file.split('/')[1]!;

function violations(graph: ImportGraph): string[] {
  const out: string[] = [];
  for (const [file, deps] of graph) {
    const allowed = ALLOWED[layerOf(file)];
    if (!allowed) continue; // cli and index.ts sit on top of everything
    for (const dep of deps) if (!allowed.includes(layerOf(dep))) out.push(`${file} imports ${dep}`);
  }
  return out;
}

describe('layers of src/', () => {
  const graph = importGraph('src');

  it('has no import cycle, type-only imports included', () => {
    expect(importCycles(graph)).toEqual([]);
  });

  it('imports only downwards: contracts ← persistence/tools/providers/streams ← actors ← machines ← runtime', () => {
    expect(violations(graph)).toEqual([]);
  });

  it('finds a cycle and an upward import when there is one', () => {
    const bad: ImportGraph = new Map([
      ['src/contracts/a.ts', ['src/actors/b.ts']],
      ['src/actors/b.ts', ['src/contracts/a.ts']],
    ]);
    expect(importCycles(bad)).toEqual([['src/actors/b.ts', 'src/contracts/a.ts']]);
    expect(violations(bad)).toEqual(['src/contracts/a.ts imports src/actors/b.ts']);
  });
});
