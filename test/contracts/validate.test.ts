import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, scriptedModel, ValidationError } from '../../src/index.js';

// A union that matched no option is reported as its best option's issues (src/contracts/validate.ts,
// docs/guarantees.md "Bad input"): the one that got furthest into the input, through the unions
// inside it, then the one with the fewest issues; where none got in, what each option would take.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function refusalsOf(inputs: unknown[]): Promise<string[][]> {
  const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['answer']) });
  cleanups.push(() => runtime.close());
  const s = await runtime.openSession('s1');
  const out = inputs.map((input) => {
    try {
      s.run(input as never);
    } catch (e) {
      expect(e).toBeInstanceOf(ValidationError);
      return (e as ValidationError).issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    }
    throw new Error(`accepted: ${JSON.stringify(input)}`);
  });
  expect((await s.run('hi').result).status).toBe('succeeded'); // nothing was half-done
  return out;
}

describe('union refusals name the field of the option meant', () => {
  it("session.run with a bad message object names the message's field, not the request form's kind", async () => {
    const [role, content, nested] = await refusalsOf([
      { role: 'assistant', content: 'x' },
      { role: 'user', content: 1 },
      { kind: 'prompt', message: { role: 'system', content: 'x' } },
    ]);
    expect(role).toEqual([expect.stringMatching(/^role: .*must have role "user"/)]);
    expect(content).toEqual(['content: Invalid input: expected string, received number; or expected array, received number']);
    expect(nested).toEqual([expect.stringMatching(/^message\.role: /)]);
  });

  it("session.run with a request form of one bad field names that field, not the message form's role, content and keys", async () => {
    const refusals = await refusalsOf([
      { kind: 'respond', runId: 'r', questionId: 1, answer: 'x' },
      { kind: 'continue', runId: 5 },
      { kind: 'prompt', message: 'hi', runId: 5 },
    ]);
    expect(refusals).toEqual([
      ['questionId: Invalid input: expected string, received number'],
      ['runId: Invalid input: expected string, received number'],
      ['runId: Invalid input: expected string, received number'],
    ]);
  });

  it('where no option got in, the refusal lists what each would take, the options of a union option among them', async () => {
    const [message, root] = await refusalsOf([{ kind: 'prompt', message: 5 }, 123]);
    const each = 'expected string, received number; or expected object, received number; or expected array, received number';
    expect(message).toEqual([`message: Invalid input: ${each}`]);
    expect(root).toEqual([`: Invalid input: ${each}`]);
  });
});
