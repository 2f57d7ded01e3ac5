import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('actorloop-mcp-example-');
afterEach(async () => {
  await killAllChildren();
});
afterAll(async () => {
  await dir.cleanup();
});

describe('examples/mcp.ts', () => {
  it("an agent runs on a local MCP server's tools: parallel reads and sums, one exclusive deploy, the summary", async () => {
    const child = spawnTs('examples/mcp.ts', [join(dir.path, 'data')], { label: 'mcp example' });
    const exit = await child.waitExit(60_000);
    expect(exit.code, child.describe()).toBe(0);
    const out = child.lines.join('\n');
    expect(out).toContain('tool calculate (parallel)\ntool read_file (parallel)\ntool deploy (exclusive)');
    expect(out).toContain('calculate: (1 - 0.999) * 30 * 24 * 60 = 43.2');
    expect(out).toMatch(/^deploy: deployed checkout 2\.4\.0 to staging \(deployment dep-[0-9a-f]{8}\)$/m);
    expect(out).toMatch(/^completed Done: deployed checkout 2\.4\.0 to staging .* 43\.2 minutes, and the canary is 4 pods\./m);
  });
});
