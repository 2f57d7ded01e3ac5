import type { Observable } from 'rxjs';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  defineTool,
  memoryStore,
  createRuntime,
  scriptedModel,
  type ApprovalReceipt,
  type ExecutionResult,
  type ExecutionSession,
  type Recovered,
  type Runtime,
  type SessionRunHandle,
  type PendingRequest,
  type RecoveryOutcome,
  type SessionSnapshot,
  type SessionStatus,
  type UncertainCall,
  type RuntimeOptions,
  ValidationError,
} from '../../src/index.js';

// The public API's types say what the values are (checked by `tsc`, which type-checks test/).

describe('public types', () => {
  it("a snapshot's status is one of the session states, its pending request a PendingRequest", async () => {
    expectTypeOf<SessionSnapshot['status']>().toEqualTypeOf<SessionStatus>();
    expectTypeOf<NonNullable<SessionSnapshot['pending']>>().toEqualTypeOf<PendingRequest>();
    expectTypeOf<NonNullable<RecoveryOutcome['interruptedRuns'][number]['pendingRequest']>>().toEqualTypeOf<PendingRequest>();
    expectTypeOf<ExecutionResult['uncertainCalls']>().toEqualTypeOf<UncertainCall[]>();
    expectTypeOf<UncertainCall['resolution']>().toEqualTypeOf<
      'reconciled' | 'uncertain-hanging' | 'uncertain-settled' | 're-run' | 'skipped'
    >();
    expectTypeOf<NonNullable<SessionSnapshot['lastError']>['kind']>().toEqualTypeOf<
      'cancelled' | 'execution' | 'finalization' | 'inconsistent'
    >();
    const pay = defineTool({
      name: 'pay',
      description: '',
      parameters: z.object({}),
      needsApproval: true,
      execute: () => ({ paid: true }),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'pay', arguments: {} }] }]),
      tools: [pay],
    });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'pay' });
    const snap = s.snapshot();
    expect(snap.status).toBe('suspended');
    // narrowing works on the typed union, no casts
    if (snap.pending?.kind === 'approval') expect(snap.pending.calls.map((c) => c.callId)).toEqual(['p1']);
    else expect.unreachable('an approval is pending');
    await runtime.close();
  });

  it("a result's recovered is a Recovered; runtime.run's handle has its sessionId; approve and deny resolve an ApprovalReceipt", () => {
    expectTypeOf<NonNullable<ExecutionResult['recovered']>>().toEqualTypeOf<Recovered>();
    expectTypeOf<Recovered['uncertainCalls']>().toEqualTypeOf<UncertainCall[]>();
    expectTypeOf<ReturnType<Runtime['run']>>().toEqualTypeOf<SessionRunHandle>();
    expectTypeOf<SessionRunHandle['sessionId']>().toEqualTypeOf<string>();
    expectTypeOf<ReturnType<ExecutionSession['approve']>>().toEqualTypeOf<Promise<ApprovalReceipt>>();
    expectTypeOf<string>().toExtend<Parameters<Runtime['submit']>[1]>();
  });

  it("createRuntime's options type takes what createRuntime takes: its killSwitch and tracing too", () => {
    // @ts-expect-error a kill switch is an AbortSignal or an RxJS Observable
    expect(() => createRuntime({ store: memoryStore(), killSwitch: 'yes' })).toThrow(ValidationError);
    // @ts-expect-error tracing is false or { tracerProvider?, tracer?, recordContent? }
    expect(() => createRuntime({ store: memoryStore(), tracing: 42 })).toThrow(ValidationError);
    // @ts-expect-error recordContent is a boolean
    expect(() => createRuntime({ store: memoryStore(), tracing: { recordContent: 'yes' } })).toThrow(ValidationError);
    expectTypeOf<{ killSwitch: AbortSignal }>().toExtend<RuntimeOptions>();
    expectTypeOf<{ killSwitch: Observable<boolean> }>().toExtend<RuntimeOptions>();
    expectTypeOf<{ tracing: false }>().toExtend<RuntimeOptions>();
    expectTypeOf<{ tracing: { recordContent: true } }>().toExtend<RuntimeOptions>();
  });
});
