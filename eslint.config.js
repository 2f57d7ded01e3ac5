// The type-aware half of `npm run lint`; the other half, `biome format`, checks the formatting
// (biome.json: width 140, single quotes, semicolons; markdown is prose and left alone).
// Only rules that catch a broken promise are on: a promise nobody awaits or catches, a promise
// where a void callback is expected, a switch that forgets a case, and an outside name used as a
// property key (prototype builtins, `__proto__`).
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';
import { noOutsideKey } from './eslint/no-outside-key.js';

const typed = ['**/*.ts', '**/*.cts', '**/*.mts'];
const plain = ['**/*.js', '**/*.mjs', '**/*.cjs'];

export default defineConfig(
  { ignores: ['dist/', 'node_modules/', 'bench/peers/', 'bench/out/', 'coverage/', '.tmp/'] },
  {
    files: [...typed, ...plain],
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    plugins: { '@typescript-eslint': tseslint.plugin },
    languageOptions: { parser: tseslint.parser, ecmaVersion: 2023, sourceType: 'module' },
    rules: {
      'no-prototype-builtins': 'error',
      'prefer-object-has-own': 'error',
      'no-sparse-arrays': 'error',
      'no-restricted-properties': ['error', { property: '__proto__', message: 'Use Object.getPrototypeOf / Object.setPrototypeOf.' }],
    },
  },
  {
    files: typed,
    plugins: { actorloop: { rules: { 'no-outside-key': noOutsideKey } } },
    languageOptions: {
      parserOptions: { projectService: { allowDefaultProject: ['vitest.config.ts'] }, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    // the library and the examples (code an app copies) read names that come from outside: tool
    // names, header names, JSON keys; tests and benchmarks key their own tallies by their own data
    files: ['src/**/*.ts', 'examples/**/*.ts'],
    rules: { 'actorloop/no-outside-key': ['error', { prototypelessFactories: ['ownRecord', 'withEntry'] }] },
  },
);
