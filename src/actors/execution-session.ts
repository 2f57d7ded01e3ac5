import { createActor, type Actor } from 'xstate';
import type { Observable } from 'rxjs';
import { ExecutionBusy, StoreClosedError, ValidationError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import type { Message } from '../contracts/message.js';
import { ExecutionRequest, toMessages, type ExecutionResult } from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { EventStore } from '../persistence/event-store.js';
import { boundSessionMachine } from './run-actors.js';
import type { RunEnv } from './run-env.js';
import { runEndEventId, runStartEventId } from './run-lifecycle.js';
import type { ResolvedRuntimeOptions } from './runtime-options.js';
import type { EnvelopeStream, Envelope } from '../streams/envelopes.js';

/** The frozen context a run was started with (DESIGN §6 `turnContexts`). */
export interface TurnContext {
  runId: string;
  turn: number;
  modelId: string;
  systemPrompt?: string;
  messages: readonly Message[];
  tools: readonly string[];
  policyRevision: string;
}

export interface SessionSnapshot {
  sessionId: string;
  status: string;
  phase: string;
  messages: Message[];
  step: number;
  toolCalls: number;
  tokens: number;
  cost: string;
  recoveries: number;
  pending?: unknown;
  lastError?: { kind: string; message: string };
}

/**
 * One open session: the durable conversation's live writer (DESIGN §6). Made by
 * `runtime.openSession`.
 * @example
 * const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })
 */
export class ExecutionSession {
  readonly actor: Actor<ReturnType<typeof boundSessionMachine>>;
  readonly turnContexts = new Map<string, TurnContext>();
  stateContext: unknown = undefined;
  private busy = false;
  private lastTurn: number;
  private lastResult?: ExecutionResult;
  private waiters = new Map<string, (r: ExecutionResult) => void>();
  private closed = false;

  constructor(
    readonly sessionId: string,
    readonly sessionInstanceId: string,
    private readonly env: RunEnv,
    private readonly store: EventStore,
    private readonly options: ResolvedRuntimeOptions,
    private readonly stream: EnvelopeStream,
    private readonly fingerprint: string,
    lastTurn: number,
    writerEpoch: number,
  ) {
    this.lastTurn = lastTurn;
    this.actor = createActor(boundSessionMachine(env), {
      input: { sessionId, sessionInstanceId, writerEpoch },
      ...(options.inspect ? { inspect: options.inspect } : {}),
    });
    this.actor.on('run.finished', ({ result }) => {
      this.lastResult = result;
      this.busy = false;
      const w = this.waiters.get(`${result.runId}\u0000${result.attemptId}`);
      this.waiters.delete(`${result.runId}\u0000${result.attemptId}`);
      this.stream.publish({ type: 'execution_finished', result });
      w?.(result);
    });
    this.actor.start();
  }

  /** Every envelope of this session, live (RxJS). */
  get events$(): Observable<Envelope> {
    return this.stream.events$;
  }

  /**
   * Runs one attempt. Rejects only for bad input (ValidationError) or a busy session
   * (ExecutionBusy); everything that happens while running comes back as the result.
   */
  async execute(request: ExecutionRequest): Promise<ExecutionResult> {
    const req = parseInput(ExecutionRequest, request, 'session.execute');
    if (this.closed) throw new StoreClosedError(`session ${this.sessionId}`);
    if (this.busy) throw new ExecutionBusy(this.sessionId, String(this.actor.getSnapshot().context.activeRunId ?? 'unknown'));
    this.busy = true;
    try {
      const recorded = await this.recordedResult(req.runId, req.attemptId);
      if (recorded) {
        this.busy = false;
        return recorded;
      }
      if (req.kind !== 'prompt') {
        throw new ValidationError('session.execute', [{ path: ['kind'], message: `kind "${req.kind}" is not supported by this version yet (prompt only)` }]);
      }
    } catch (e) {
      this.busy = false;
      throw e;
    }
    const turn = ++this.lastTurn;
    const messages = toMessages(req.message);
    this.turnContexts.set(
      req.runId,
      Object.freeze({
        runId: req.runId,
        turn,
        modelId: this.env.model.modelId,
        ...(this.options.systemPrompt !== undefined ? { systemPrompt: this.options.systemPrompt } : {}),
        messages: Object.freeze([...this.env.prefix, ...this.env.surface.messages, ...messages]),
        tools: Object.freeze([...this.env.tools.keys()]),
        policyRevision: this.fingerprint,
      }),
    );
    this.stream.runId = req.runId;
    this.stream.attemptId = req.attemptId;
    return new Promise<ExecutionResult>((resolve) => {
      this.waiters.set(`${req.runId}\u0000${req.attemptId}`, resolve);
      this.actor.send({
        type: 'EXECUTE',
        run: {
          runId: req.runId,
          attemptId: req.attemptId,
          runEpoch: 1,
          turn,
          kind: 'prompt',
          messages,
          executionProfileFingerprint: this.fingerprint,
          budget: this.options.budget,
          maxProtocolCorrections: this.options.config.maxProtocolCorrections,
          maxParallelTools: this.options.config.maxParallelTools,
          startedAt: Date.now(),
        },
      });
    });
  }

  /** The result recorded for this attempt, if it ran before (nothing runs again). */
  private async recordedResult(runId: string, attemptId: string): Promise<ExecutionResult | undefined> {
    const end = await this.store.getEventById(this.sessionId, runEndEventId(runId, attemptId));
    if (end) return end.payload.result as ExecutionResult;
    const start = await this.store.getEventById(this.sessionId, runStartEventId(runId, attemptId));
    if (!start) return undefined;
    return {
      runId,
      attemptId,
      outcome: 'incomplete',
      status: 'detached',
      error: { kind: 'inconsistent', message: `attempt ${attemptId} of run ${runId} was interrupted before it settled; continue the run with a new attempt` },
      checkpointCommitted: false,
      historyConsistent: true,
      deliveryErrors: [],
      usage: { inputTokens: 0, outputTokens: 0 },
      steps: 0,
    };
  }

  /** JSON state for UIs and debugging. */
  snapshot(): SessionSnapshot {
    const snap = this.actor.getSnapshot();
    const run = snap.children.run?.getSnapshot() as { value: unknown; context: { step: number; toolCalls: number; cost: string; recoveries: number } } | undefined;
    const r = this.lastResult;
    return {
      sessionId: this.sessionId,
      status: String(snap.value),
      phase: run ? String(run.value) : String(snap.value),
      messages: [...this.env.surface.messages],
      step: run?.context.step ?? r?.steps ?? 0,
      toolCalls: run?.context.toolCalls ?? 0,
      tokens: this.env.prefixTokens + this.env.surface.tokens,
      cost: run?.context.cost ?? '0',
      recoveries: run?.context.recoveries ?? 0,
      ...(r?.pendingRequest ? { pending: r.pendingRequest } : {}),
      ...(r?.error ? { lastError: { kind: r.error.kind, message: r.error.message } } : {}),
    };
  }

  /** Applies committed records to the in-memory views (surface, resource locks). */
  onCommitted(records: readonly EventRecord[]): void {
    this.env.surface.apply(records);
    for (const r of records) {
      if (r.type === 'tool/result') {
        const o = r.payload.outcome as ToolOutcome;
        if (o.kind === 'uncertain-hanging' || (o.kind === 'cancelled' && !o.settled)) for (const k of o.resourceLocks) this.env.heldLocks.add(k);
        if (o.kind === 'completed') for (const k of o.releaseResources) this.env.heldLocks.delete(k);
      } else if (r.type === 'resources/released') {
        for (const k of r.payload.keys as string[]) this.env.heldLocks.delete(k);
      }
    }
  }

  /** Stops the session actor. A run in progress is abandoned where it stands (resumable). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.actor.send({ type: 'CLOSE' });
    this.actor.stop();
    this.stream.complete();
  }
}
