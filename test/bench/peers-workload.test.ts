import { describe, expect, it } from 'vitest';
import { checkAnswer, decide, toolValue } from '../../bench/peers/workload.js';

// The peer benchmark's scripted model (bench/peers/workload.ts) must fail a framework that loses
// or garbles tool results, so that no row can report a fast wrong figure.
describe('bench/peers scripted model', () => {
  const resultsUpTo = (steps: number) =>
    Array.from({ length: steps }, (_, i) => [{ text: toolValue('lookup', i) }, { text: toolValue('write', i) }]).flat();

  it('asks for two tool calls per step and answers after K-1 steps when every result arrives', () => {
    const k = 4;
    for (let step = 0; step < k - 1; step++) {
      const d = decide(k, resultsUpTo(step));
      expect(d).toMatchObject({
        kind: 'tools',
        step,
        calls: [
          { name: 'lookup', i: step },
          { name: 'write', i: step },
        ],
      });
    }
    const last = decide(k, resultsUpTo(k - 1));
    expect(last.kind).toBe('answer');
    expect(() => checkAnswer(k, last.kind === 'answer' ? last.text : undefined)).not.toThrow();
  });

  it('accepts a result the framework JSON-encoded', () => {
    expect(decide(3, [{ text: JSON.stringify(toolValue('lookup', 0)) }, { text: toolValue('write', 0) }]).kind).toBe('tools');
  });

  it('fails a step whose previous results were lost, garbled or duplicated', () => {
    expect(() => decide(5, resultsUpTo(2).slice(0, 3))).toThrow(/two per step/);
    const garbled = resultsUpTo(2);
    garbled[3] = { text: 'W0' };
    expect(() => decide(5, garbled)).toThrow(/do not hold/);
    const duplicated = resultsUpTo(2);
    duplicated[3] = duplicated[2]!;
    expect(() => decide(5, duplicated)).toThrow(/do not hold/);
  });

  it('fails a session whose final answer is not the scripted one', () => {
    expect(() => checkAnswer(5, 'done after 3 tool steps')).toThrow(/expected "done after 4 tool steps"/);
    expect(() => checkAnswer(5, undefined)).toThrow();
  });
});
