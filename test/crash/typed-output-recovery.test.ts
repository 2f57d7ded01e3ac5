import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, REPO_ROOT, spawnTs } from './child-util.js';

/**
 * A run with an output schema whose process is SIGKILLed between `final/message` and its
 * delivery: the next process delivers and returns the stored object, asking no model.
 */
const CHILD = join(REPO_ROOT, 'test/crash/typed-output-child.ts');
const dir = tempDir('actorloop-typed-crash-');
afterEach(killAllChildren);
afterAll(() => dir.cleanup());

async function life(phase: 'first' | 'recover') {
  const child = spawnTs(CHILD, [phase, dir.path], { label: `typed-output-child ${phase}` });
  await child.waitExit(60_000);
  expect(
    child.lines.filter((l) => l.startsWith('ERROR')),
    child.describe(),
  ).toEqual([]);
  return child;
}
const line = (lines: string[], tag: string) => JSON.parse(lines.find((l) => l.startsWith(`${tag} `))!.slice(tag.length + 1));

describe('typed output after a SIGKILL (real child processes)', () => {
  it('a crash between final/message and its delivery: the reopened run delivers and returns the stored object, with no model call', async () => {
    const invoice = { number: 'INV-7', total: 12.5, lines: [{ item: 'tea', amount: 12.5 }] };
    const first = await life('first');
    expect(first.exit?.signal, first.describe()).toBe('SIGKILL');
    expect(first.lines.some((l) => l.startsWith('DELIVERED'))).toBe(false);
    const second = await life('recover');
    expect(second.lines, second.describe()).toContain('DONE');
    expect(line(second.lines, 'DELIVERED')).toEqual(invoice);
    expect(line(second.lines, 'RESULT')).toEqual({ status: 'succeeded', output: invoice, finalMessage: JSON.stringify(invoice) });
    expect(line(second.lines, 'WAITED')).toEqual({ status: 'succeeded', output: invoice });
    expect(line(second.lines, 'MODELCALLS')).toBe(0);
  });
});
