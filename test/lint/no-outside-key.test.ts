import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';
import { describe, expect, it } from 'vitest';
import { noOutsideKey } from '../../eslint/no-outside-key.js';

// eslint/no-outside-key.js, run as `npm run lint` runs it (type information from a project), over a
// fixture whose lines say whether they must be reported.
const dir = fileURLToPath(new URL('./fixtures/', import.meta.url));
const fixture = `${dir}outside-keys.ts`;

describe('no-outside-key', () => {
  it('reports a string key on a plain object (read, write, `in`) and passes Maps, arrays, literal keys, own keys, hasOwn guards and prototypeless objects', async () => {
    const eslint = new ESLint({
      cwd: dir,
      overrideConfigFile: true,
      overrideConfig: [
        {
          files: ['**/*.ts'],
          plugins: { actorloop: { rules: { 'no-outside-key': noOutsideKey } } },
          languageOptions: { parser: tseslint.parser, parserOptions: { projectService: true, tsconfigRootDir: dir } },
          rules: { 'actorloop/no-outside-key': ['error', { prototypelessFactories: ['ownRecord'] }] },
        },
      ],
    });
    const [result] = await eslint.lintFiles([fixture]);
    expect(result!.messages.filter((m) => m.ruleId !== 'actorloop/no-outside-key')).toEqual([]);
    const reported = result!.messages.map((m) => m.line);
    const expected = readFileSync(fixture, 'utf8')
      .split('\n')
      .flatMap((line, i) => (line.endsWith('// flagged') ? [i + 1] : []));
    expect(expected.length).toBe(4);
    expect(reported).toEqual(expected);
  });
});
