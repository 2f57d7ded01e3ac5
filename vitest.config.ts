import { defineConfig } from 'vitest/config';
import { loadFactor } from './test/helpers/load.js';

// measured once here, shared with the workers and the processes they spawn (test/helpers/load.ts)
process.env.ACTORLOOP_LOAD_FACTOR = String(loadFactor());
const scaled = (ms: number) => Math.round(ms * Number(process.env.ACTORLOOP_LOAD_FACTOR));

export default defineConfig({
  // `import 'actorloop'` (the examples) resolves through the exports map to src/ (docs/packaging.md)
  // (not vite's `module` condition: packages such as @opentelemetry/api map it to an ESM build
  // whose extensionless imports only a bundler resolves)
  ssr: { resolve: { conditions: ['actorloop-source', 'node', 'development|production'] } },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: scaled(60_000),
    hookTimeout: scaled(60_000),
    pool: 'forks',
    execArgv: ['--expose-gc'],
  },
});
