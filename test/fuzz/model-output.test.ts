import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, scriptedModel, type ScriptedStep } from '../../src/index.js';
import { unclosable } from '../helpers/backends.js';
import { answerUntilSettled, decisionPicker, fuzzTools, scriptedStep } from './arbitraries.js';
import { bounded, expectLogInvariants, expectResult, fuzz, propertyTimeout, settlesTyped } from './fuzz-lib.js';

/**
 * Generated model output (ids, names, arguments, finish reasons, errors) through a scripted
 * provider: every run settles within its bound with a result (or a typed error), and the log
 * keeps its invariants. Approvals are answered with generated decisions, questions with
 * generated answers; then the session must still run a plain prompt.
 */

const config = { maxProviderAttempts: 2, retryBackoffMs: 1 };
const budget = { maxSteps: 6 };

describe('fuzz: model output through a scripted provider', () => {
  it('every generated script settles with a result, keeping the log invariants', { timeout: propertyTimeout() }, async () => {
    await fuzz(
      'model-output/scripted',
      fc.record({
        steps: fc.array(scriptedStep, { minLength: 1, maxLength: 5 }),
        pick: decisionPicker,
        answer: fc.jsonValue({ maxDepth: 2 }),
      }),
      async ({ steps, pick, answer }) => {
        const ran: string[] = [];
        const store = memoryStore();
        const runtime = createRuntime({
          store,
          model: scriptedModel([...(steps as ScriptedStep[]), 'final answer', 'again']),
          tools: fuzzTools(ran),
          askUser: true,
          config,
          budget,
        });
        try {
          const s = await runtime.openSession('s');
          const first = await settlesTyped(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' }), 'prompt');
          expect(first.error, `prompt rejected: ${first.error?.message}`).toBeUndefined();
          expectResult(first.value);
          const r = await bounded(answerUntilSettled(s, first.value!, pick, answer), 'answers');
          expectResult(r);
          const settled = r.status !== 'suspended' ? ['r'] : [];
          await expectLogInvariants(store, 's', settled);
          // the session is not left broken: a suspended run is still open (busy), else a prompt runs
          const next = await settlesTyped(s.execute({ kind: 'prompt', runId: 'r2', attemptId: 'b', message: 'next' }), 'next prompt');
          if (r.status === 'suspended') expect(next.error?.name).toBe('ExecutionBusy');
          else expectResult(next.value);
          await expectLogInvariants(store, 's');
        } finally {
          await bounded(runtime.close(), 'close');
        }
      },
    );
  });

  it('a run interrupted by a crash at a generated point continues to a settled end on reopen', { timeout: propertyTimeout() }, async () => {
    await fuzz(
      'model-output/crash-continue',
      fc.record({ steps: fc.array(scriptedStep, { minLength: 1, maxLength: 4 }), crashAfterMs: fc.integer({ min: 0, max: 15 }) }),
      async ({ steps, crashAfterMs }) => {
        const store = memoryStore();
        const shared = unclosable(store);
        const script = [...(steps as ScriptedStep[]), 'final answer'];
        const rt1 = createRuntime({
          store: shared,
          model: scriptedModel(script.map((st) => (typeof st === 'object' && !('error' in st) ? { ...st, delayMs: 2 } : st))),
          tools: fuzzTools([]),
          config,
          budget,
        });
        const s1 = await rt1.openSession('s');
        void s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'go' }).catch(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, crashAfterMs));
        // rt1 is abandoned (never closed): a second runtime fences it, as a restarted process would
        const rt2 = createRuntime({
          store: shared,
          model: scriptedModel(['recovered answer'], { loop: true }),
          tools: fuzzTools([]),
          config,
          budget,
        });
        try {
          const s2 = await bounded(rt2.openSession('s'), 'reopen');
          const open = s2.recovery.interruptedRuns[0];
          if (open && !open.pendingRequest) {
            const r = await settlesTyped(s2.execute({ kind: 'continue', runId: 'r', attemptId: 'a2' }), 'continue');
            expect(r.error, `continue rejected: ${r.error?.message}`).toBeUndefined();
            expectResult(r.value);
          }
          await expectLogInvariants(store, 's');
        } finally {
          await bounded(rt2.close(), 'close');
        }
      },
    );
  });
});
