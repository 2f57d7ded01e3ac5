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
    // two test files at a time even on 2 cores (vitest's default there is one): most files wait
    // on child processes, sockets, PostgreSQL or a browser, so the second core would sit idle —
    // `npm test` 510–556 s → ≈ 380 s wall on the 2-core machine
    maxWorkers: 2,
    execArgv: ['--expose-gc'],
  },
});
