import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';
import { loadFactor } from './test/helpers/load.js';

// measured once here, shared with the workers and the processes they spawn (test/helpers/load.ts)
process.env.ACTORLOOP_LOAD_FACTOR = String(loadFactor());
const scaled = (ms: number) => Math.round(ms * Number(process.env.ACTORLOOP_LOAD_FACTOR));

export default defineConfig({
  // `import 'actorloop'` (the examples) resolves through the exports map to src/ (docs/packaging.md)
  ssr: { resolve: { conditions: ['actorloop-source', ...defaultServerConditions] } },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: scaled(60_000),
    hookTimeout: scaled(60_000),
    pool: 'forks',
    execArgv: ['--expose-gc'],
  },
});
