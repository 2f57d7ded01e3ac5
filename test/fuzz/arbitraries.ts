import fc from 'fast-check';
import { z } from 'zod';
import { defineTool, type AnyTool, type ExecutionSession, type ExecutionResult } from '../../src/index.js';
import { isId } from '../../src/contracts/ids.js';
import { hostileKey } from './fuzz-lib.js';

/** Generated model output and public-API input for the fuzz properties. */

export const FINISH_REASONS = ['stop', 'tool_calls', 'length', 'content_filter', 'refusal', 'error'] as const;

/** Tool-call argument text: JSON objects (with hostile keys), other JSON, broken JSON. */
export const argumentText = fc.oneof(
  fc.dictionary(hostileKey, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }).map((o) => JSON.stringify(o)),
  fc.record({ text: fc.string({ maxLength: 20 }), key: hostileKey }).map((o) => JSON.stringify(o)),
  fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v)),
  fc.constantFrom(
    '',
    '{',
    '{"text":',
    'null',
    '[]',
    '{"__proto__":{"polluted":1}}',
    '{"constructor":{"prototype":{"x":1}}}',
    '{"text":"\\ud800"}',
  ),
  fc.string({ maxLength: 30 }),
);

/** Names a model might call: the tools the runtime has, prototype names, unknown ones. */
export const toolName = fc.oneof(fc.constantFrom('echo', 'exclusive_op', 'failing', 'approve_me', 'askUser', 'constructor'), hostileKey);

export const toolCall = fc.record({ id: hostileKey, name: toolName, arguments: argumentText });

/**
 * One model turn as a scripted step (an id may repeat within a message, or be left out; scriptedModel
 * takes ids under the id rule, so the ids it is given do: the OpenAI wire fuzz sends the rest).
 */
export const scriptedStep = fc.oneof(
  {
    weight: 5,
    arbitrary: fc
      .record({
        text: fc.option(fc.string({ maxLength: 40 }), { nil: undefined }),
        toolCalls: fc.option(
          fc.array(
            fc.record({
              id: fc.option(
                hostileKey.filter((k) => isId(k)),
                { nil: undefined },
              ),
              name: toolName,
              arguments: argumentText,
            }),
            { maxLength: 4 },
          ),
          { nil: undefined },
        ),
        finishReason: fc.option(fc.constantFrom(...FINISH_REASONS), { nil: undefined }),
      })
      .map((s) => Object.fromEntries(Object.entries(s).filter(([, v]) => v !== undefined))),
  },
  {
    weight: 1,
    arbitrary: fc
      .record({
        error: fc.record({
          message: fc.string({ maxLength: 20 }),
          retryable: fc.boolean(),
          code: fc.option(fc.string({ maxLength: 8 }), { nil: undefined }),
        }),
      })
      .map((s) => ({
        error: Object.fromEntries(Object.entries(s.error).filter(([, v]) => v !== undefined)) as { message: string; retryable: boolean },
      })),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 30 }) },
);

/** The tools the runtimes under test have: parallel, exclusive with resources, throwing, needing approval, and one named `constructor`. */
export function fuzzTools(ran: string[]): AnyTool[] {
  const loose = z.looseObject({ text: z.string().optional(), key: z.string().optional() });
  return [
    defineTool({
      name: 'echo',
      description: 'echoes',
      mode: 'parallel',
      parameters: loose,
      execute: (a, ctx) => (ran.push(ctx.callId), a.text ?? ''),
    }),
    defineTool({
      name: 'exclusive_op',
      description: 'locks its key',
      parameters: loose,
      resources: (a) => (a.key ? [a.key] : []),
      execute: (_a, ctx) => (ran.push(ctx.callId), 'done'),
    }),
    defineTool({
      name: 'failing',
      description: 'throws',
      parameters: loose,
      execute: () => {
        throw new Error('tool failed');
      },
    }),
    defineTool({
      name: 'approve_me',
      description: 'needs approval',
      needsApproval: true,
      mode: 'parallel',
      parameters: loose,
      execute: (_a, ctx) => (ran.push(ctx.callId), 'approved and run'),
    }),
    defineTool({
      name: 'constructor',
      description: 'named like a prototype property',
      mode: 'parallel',
      parameters: loose,
      execute: (_a, ctx) => (ran.push(ctx.callId), 'constructed'),
    }),
  ];
}

/**
 * Answers a suspended run until it settles (at most `rounds` answers): approvals with `pick`ed
 * decisions (an id left out is a denial), questions with `answer`. A respond refused with a typed
 * error is answered again with a plain one.
 */
export async function answerUntilSettled(
  s: ExecutionSession,
  first: ExecutionResult,
  pick: (ids: string[]) => Record<string, unknown>,
  answer: unknown,
  rounds = 4,
): Promise<ExecutionResult> {
  let r = first;
  for (let i = 0; i < rounds && r.status === 'suspended' && r.pendingRequest; i++) {
    const pr = r.pendingRequest;
    const ids = { runId: r.runId, attemptId: `${r.attemptId}+${i}`, questionId: pr.questionId };
    const given = pr.kind === 'approval' ? { decisions: pick(pr.calls.map((c) => c.callId)) } : answer;
    try {
      r = await s.execute({ kind: 'respond', ...ids, answer: given });
    } catch {
      r = await s.execute({
        kind: 'respond',
        ...ids,
        attemptId: `${ids.attemptId}b`,
        answer: pr.kind === 'approval' ? { decisions: {} } : 'ok',
      });
    }
  }
  return r;
}

/** Decisions for some of the call ids (JSON.parse-made, so `__proto__` is an own key). */
export const decisionPicker = fc.func(fc.constantFrom('approve', 'deny', 'skip')).map((f) => (ids: string[]) => {
  const out: Record<string, string> = JSON.parse('{}');
  for (const id of ids) {
    const d = f(id);
    if (d !== 'skip') Object.defineProperty(out, id, { value: d, enumerable: true, writable: true, configurable: true });
  }
  return out;
});

const cyclic = () => {
  const o: Record<string, unknown> = { a: 1 };
  o.self = o;
  return o;
};

/** Values that are not JSON, made fresh per case. */
export const poison = fc
  .constantFrom<() => unknown>(
    () => 1n,
    cyclic,
    () => [cyclic()],
    () => () => 1,
    () => Symbol('s'),
    () => ({ [Symbol('k')]: 1 }),
    () => ({
      get boom(): string {
        throw new Error('getter threw');
      },
    }),
    () =>
      new Proxy(
        {},
        {
          ownKeys: () => {
            throw new Error('ownKeys threw');
          },
        },
      ),
    () => new Date(0),
    () => new Map([[1, 2]]),
    () => Number.NaN,
    () => undefined,
    () => [1, , 2], // eslint-disable-line no-sparse-arrays
    () => JSON.parse('{"__proto__":{"polluted":true}}'),
  )
  .map((make) => make());

/** JSON, non-JSON, or JSON with a non-JSON value somewhere inside. */
export const hostileValue = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  poison,
  fc.record({ a: fc.jsonValue({ maxDepth: 1 }), b: poison }),
  fc.array(fc.oneof(fc.jsonValue({ maxDepth: 1 }), poison), { maxLength: 3 }),
  fc.anything({ maxDepth: 2 }),
);
