import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../crash/child-util.js';

/**
 * `actorloop/client` runs in a browser: bundled for the browser platform, its module graph holds
 * no `node:` module and no package but rxjs and @xstate/store (esbuild fails on a Node builtin
 * when the platform is the browser, and the metafile lists every module it took in).
 */
describe('actorloop/client in the browser', () => {
  it('imports nothing from node: and no Node-only package', async () => {
    const out = await build({
      entryPoints: [`${REPO_ROOT}/src/web/client.ts`],
      bundle: true,
      platform: 'browser',
      format: 'esm',
      write: false,
      metafile: true,
      logLevel: 'silent',
      absWorkingDir: REPO_ROOT,
    });
    const inputs = Object.keys(out.metafile.inputs);
    expect(inputs.filter((i) => i.startsWith('node:'))).toEqual([]);
    const packages = new Set(
      inputs.filter((i) => i.includes('node_modules/')).map((i) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(i)![1]),
    );
    expect([...packages].filter((p) => !['rxjs', '@xstate/store', 'tslib'].includes(p!))).toEqual([]);
    expect(packages.has('rxjs') && packages.has('@xstate/store')).toBe(true);
    const ours = inputs.filter((i) => i.startsWith('src/'));
    expect(ours.every((i) => i.startsWith('src/web/'))).toBe(true);
    // the page-side modules are what it claims: a client and its options' checks, a parser, a view reducer and the wire types
    expect(ours.sort()).toEqual(['src/web/client-options.ts', 'src/web/client.ts', 'src/web/sse-parse.ts', 'src/web/view.ts']);
  });
});
