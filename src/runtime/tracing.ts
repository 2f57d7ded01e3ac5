import type { Clock } from '../contracts/clock.js';
import type { ExecutionResult } from '../contracts/requests.js';
import type { ModelProvider } from '../contracts/model.js';
import type { Usage } from '../contracts/message.js';
import type { Attributes, RunTracer, SpanLike, TraceIds } from '../contracts/tracing.js';
import type { EventStore } from '../persistence/event-store.js';
import type { Envelope } from '../streams/envelopes.js';
import type { AnyTool } from '../tools/define-tool.js';
import {
  CLOSED,
  endAttemptSpan,
  endHandoffSpan,
  endUnfinished,
  INTERRUPTED,
  previousAttemptLink,
  startAgentSpan,
  STEP_ENDED,
  type Unfinished,
} from './agent-spans.js';
import { traceModelCalls } from './model-spans.js';
import { endToolSpan, toolSpanAttributes } from './tool-spans.js';
import type { Tracing } from './tracing-options.js';

const KIND_INTERNAL = 0;

/** A step's span; `closes`: the span of the agent it was the last step of (ended with it, after a handoff). */
interface StepSpan {
  span: SpanLike;
  ctx: unknown;
  n: number;
  closes?: SpanLike;
}

interface AttemptSpans {
  /** The attempt's `invoke_agent` span (named after the agent the attempt starts with), and its context. */
  span: SpanLike;
  attemptCtx: unknown;
  /** The context the running agent's spans open under: the attempt's, or after a handoff its agent's span's. */
  ctx: unknown;
  /** The agent running now; after a handoff in this attempt, its own `invoke_agent` span (a child of the attempt's). */
  agent: { name: string; span?: SpanLike };
  runId: string;
  attemptId: string;
  ids: TraceIds;
  base: Attributes;
  /** `early`: opened by stepStarting, before the step_start envelope (the previous step's results still land). */
  step?: StepSpan & { early?: boolean };
  /** The step before `step`, open until its step_end (its results land under the next step's model call). */
  prev?: StepSpan;
  tools: Map<string, SpanLike>;
  modelCalls: number;
}

/** Ends a step's span, and the agent span it was the last step of. */
function endStepSpan(step: StepSpan | undefined, now: number): void {
  step?.span.end(now);
  step?.closes?.end(now);
}

/** What a step's span records of its `step_end`: the envelope's seq and the step's usage. */
function stepEnded(span: SpanLike, logSeq: number | undefined, usage: { inputTokens: number; outputTokens: number } | undefined): void {
  if (logSeq !== undefined) span.setAttribute('actorloop.step_end.seq', logSeq);
  if (usage) span.setAttributes({ 'gen_ai.usage.input_tokens': usage.inputTokens, 'gen_ai.usage.output_tokens': usage.outputTokens });
}

/**
 * One session's spans (DESIGN §6 envelopes → OpenTelemetry): an attempt span opened by the
 * `startRun` actor, step and tool-call spans from the session's envelopes, model-call spans from
 * a wrapper around the model. Every failure of the tracing API is swallowed: tracing never
 * changes what a run does.
 */
export class SessionTracer implements RunTracer {
  private attempt?: AttemptSpans;
  /** The newest attempt this process traced: a respond or continue of the same run links to it. */
  private last?: { runId: string; attemptId: string; ids: TraceIds; status?: string };

  constructor(
    private readonly t: Tracing,
    private readonly sessionId: string,
    private readonly store: EventStore,
    private readonly clock: Clock,
    /** The tools of the attempt under way (a live list's tools change between attempts). */
    private readonly tools: () => ReadonlyMap<string, AnyTool>,
    private readonly lastSeq: () => number,
    /** The name of the agent the session runs now (a handoff changes it). */
    private readonly agentName: () => string,
  ) {}

  async attemptStarting(a: {
    runId: string;
    attemptId: string;
    runEpoch: number;
    turn: number;
    kind: string;
    runFirstSeq?: number;
  }): Promise<TraceIds | undefined> {
    try {
      this.finishAttempt(undefined, INTERRUPTED);
      const previous = a.kind === 'prompt' || a.kind === 'follow_up' ? undefined : await this.previousAttempt(a.runId, a.runFirstSeq);
      const base: Attributes = {
        'actorloop.session.id': this.sessionId,
        'gen_ai.conversation.id': this.sessionId,
        'actorloop.run.id': a.runId,
        'actorloop.attempt': a.runEpoch,
        'actorloop.attempt.id': a.attemptId,
      };
      const agent = this.agentName();
      const span = startAgentSpan(this.t, agent, {
        startTime: this.clock.now(),
        attributes: { ...base, 'actorloop.turn': a.turn, 'actorloop.attempt.kind': a.kind, 'actorloop.log.seq': this.lastSeq() },
        ...(previous ? { links: [previousAttemptLink(previous)] } : {}),
        ctx: this.t.api.context.active(),
      });
      if (!span.isRecording()) {
        span.end();
        return undefined;
      }
      const sc = span.spanContext();
      const ids = { traceId: sc.traceId, spanId: sc.spanId };
      const ctx = this.t.api.trace.setSpan(this.t.api.context.active(), span);
      this.attempt = {
        span,
        attemptCtx: ctx,
        ctx,
        agent: { name: agent },
        runId: a.runId,
        attemptId: a.attemptId,
        ids,
        base,
        tools: new Map(),
        modelCalls: 0,
      };
      return ids;
    } catch {
      return undefined;
    }
  }

  inToolCall<T>(callId: string, fn: () => T): T {
    const span = this.attempt?.tools.get(callId);
    if (!span) return fn();
    let ctx: unknown;
    try {
      ctx = this.t.api.trace.setSpan(this.attempt!.step?.ctx ?? this.attempt!.ctx, span);
    } catch {
      return fn();
    }
    return this.t.api.context.with(ctx, fn);
  }

  /** The session's envelopes, as they are published. */
  onEnvelope(e: Envelope): void {
    const a = this.attempt;
    if (!a) return;
    try {
      this.apply(a, e);
    } catch {
      // a tracing failure changes nothing of the run
    }
  }

  private apply(a: AttemptSpans, e: Envelope): void {
    const ev = e.event;
    const now = this.clock.now();
    switch (ev.type) {
      case 'run_start':
        a.span.setAttribute('actorloop.run_start.seq', e.logSeq ?? 0);
        break;
      case 'step_start':
        if (a.step?.n !== ev.step) this.openStep(a, ev.step, now, false);
        else a.step.early = false;
        break;
      case 'step_end':
        if (a.prev?.n === ev.step) {
          stepEnded(a.prev.span, e.logSeq, ev.usage);
          endStepSpan(a.prev, now);
          a.prev = undefined;
          break;
        }
        if (a.step?.early && a.step.n !== ev.step) break; // the end of a step this attempt did not trace (results recovered)
        if (a.step) stepEnded(a.step.span, e.logSeq, ev.usage);
        this.endStep(a, now);
        break;
      case 'tool_start': {
        const tool = this.tools().get(ev.name);
        const attributes: Attributes = {
          ...a.base,
          ...toolSpanAttributes(ev.name, ev.callId, tool?.mode ?? 'exclusive', this.lastSeq()),
          ...(e.logSeq !== undefined ? { 'actorloop.tool_call.seq': e.logSeq } : {}),
          ...(this.t.recordContent ? { 'gen_ai.tool.call.arguments': JSON.stringify(ev.arguments) } : {}),
        };
        a.tools.set(
          ev.callId,
          this.t.tracer.startSpan(`execute_tool ${ev.name}`, { kind: KIND_INTERNAL, startTime: now, attributes }, a.step?.ctx ?? a.ctx),
        );
        break;
      }
      case 'tool_end': {
        let span = a.tools.get(ev.callId);
        const end = ev.endedAt !== undefined && ev.endedAt > 0 ? ev.endedAt : now;
        if (!span) {
          // a call that never started (skipped, denied, recovered): a span of no length
          span = this.t.tracer.startSpan(
            `execute_tool ${ev.name}`,
            {
              kind: KIND_INTERNAL,
              startTime: end,
              attributes: {
                ...a.base,
                ...toolSpanAttributes(ev.name, ev.callId, this.tools().get(ev.name)?.mode ?? 'exclusive', this.lastSeq()),
              },
            },
            // a result landing under the next step's model call belongs to the step before it
            (a.step?.early ? a.prev?.ctx : a.step?.ctx) ?? a.ctx,
          );
        }
        a.tools.delete(ev.callId);
        endToolSpan(span, ev.outcome, e.logSeq, this.t.recordContent, end);
        break;
      }
      case 'rate_limit_wait':
        (a.step?.span ?? a.span).addEvent(
          ev.state === 'waiting' ? 'actorloop.rate_limit.waiting' : 'actorloop.rate_limit.granted',
          {
            'actorloop.rate_limit.limit': ev.limit,
            ...(ev.ahead !== undefined ? { 'actorloop.rate_limit.ahead': ev.ahead } : {}),
            ...(ev.waitedMs !== undefined ? { 'actorloop.rate_limit.waited_ms': ev.waitedMs } : {}),
          },
          now,
        );
        break;
      case 'approval_requested':
      case 'question_asked':
        (a.step?.span ?? a.span).addEvent(
          ev.type === 'approval_requested' ? 'actorloop.approval_requested' : 'actorloop.question_asked',
          { 'actorloop.question.id': ev.pendingRequest.questionId, 'actorloop.log.seq': e.logSeq ?? 0 },
          now,
        );
        break;
      case 'execution_finished':
        if (ev.result.runId === a.runId && ev.result.attemptId === a.attemptId) this.finishAttempt(ev.result);
        break;
      // no span or span event of their own
      case 'input_committed':
      case 'message_start':
      case 'message_delta':
      case 'message_end':
      case 'tool_update':
        break;
    }
  }

  /**
   * Opens step `n`'s span; `early` (its model call starts while the previous step's results land):
   * that step stays open until its step_end.
   */
  private openStep(a: AttemptSpans, n: number, now: number, early: boolean): void {
    this.followAgent(a, now);
    if (early && a.step) {
      endStepSpan(a.prev, now);
      a.prev = a.step; // a.step is the new step's, below
    } else {
      this.endStep(a, now);
    }
    const attributes = { ...a.base, 'gen_ai.agent.name': a.agent.name, 'actorloop.step': n, 'actorloop.log.seq': this.lastSeq() };
    const span = this.t.tracer.startSpan('actorloop.step', { kind: KIND_INTERNAL, startTime: now, attributes }, a.ctx);
    a.step = { span, ctx: this.t.api.trace.setSpan(a.ctx, span), n, early };
    a.modelCalls = 0;
  }

  /**
   * After a handoff (docs/agents.md), the agent handed to runs under an `invoke_agent` span of its
   * own, a child of the attempt's, from its first step or model call to the attempt's end or the
   * next handoff. The agent before it keeps its span open until its last step ends.
   */
  private followAgent(a: AttemptSpans, now: number): void {
    const name = this.agentName();
    if (name === a.agent.name) return;
    const before = a.agent;
    const span = startAgentSpan(this.t, name, {
      startTime: now,
      attributes: { ...a.base, 'actorloop.handoff.from': before.name, 'actorloop.log.seq': this.lastSeq() },
      ctx: a.attemptCtx,
    });
    a.agent = { name, span };
    a.ctx = this.t.api.trace.setSpan(a.attemptCtx, span);
    if (!before.span) return;
    const last = a.step ?? a.prev;
    if (last && !last.closes) last.closes = before.span;
    else before.span.end(now);
  }

  /** The attempt under way, following a handoff first (a model call outside a step, such as a compaction's, is the new agent's). */
  private modelCallParent(): AttemptSpans | undefined {
    const a = this.attempt;
    if (!a) return undefined;
    try {
      this.followAgent(a, this.clock.now());
    } catch {
      // a tracing failure changes nothing of the run
    }
    return a;
  }

  /**
   * The step's model call is about to start (callModel): its span is the step's,
   * opened now if the step_start envelope has not come yet.
   */
  stepStarting(step: number): void {
    const a = this.attempt;
    if (!a || a.step?.n === step) return;
    try {
      this.openStep(a, step, this.clock.now(), true);
    } catch {
      // a tracing failure changes nothing of the run
    }
  }

  /** Ends the open step (and the one before it); a tool call still open ends unfinished, saying `why`. */
  private endStep(a: AttemptSpans, now: number, why: Unfinished = STEP_ENDED): void {
    endStepSpan(a.prev, now);
    a.prev = undefined;
    if (!a.step) return;
    for (const [, span] of a.tools) endUnfinished(span, why, now);
    a.tools.clear();
    endStepSpan(a.step, now);
    a.step = undefined;
  }

  /** Ends the attempt's spans: with its result, or (closed, replaced) saying why there is none. */
  private finishAttempt(result: ExecutionResult | undefined, why = INTERRUPTED): void {
    const a = this.attempt;
    if (!a) return;
    this.attempt = undefined;
    try {
      const now = this.clock.now();
      this.endStep(a, now, result ? STEP_ENDED : why);
      if (a.agent.span) endHandoffSpan(a.agent.span, result, why, now);
      if (result) endAttemptSpan(a.span, result, now);
      else endUnfinished(a.span, why, now);
      this.last = { runId: a.runId, attemptId: a.attemptId, ids: a.ids, ...(result ? { status: result.status } : {}) };
    } catch {
      // a tracing failure changes nothing of the run
    }
  }

  /** The session closes: whatever is open ends, saying so. */
  close(): void {
    this.finishAttempt(undefined, CLOSED);
  }

  /** The run's newest attempt before this one: from this process, else from its `run/start`s in the log. */
  private async previousAttempt(
    runId: string,
    fromSeq: number | undefined,
  ): Promise<{ attemptId: string; ids: TraceIds; status?: string } | undefined> {
    if (this.last?.runId === runId) return this.last;
    if (fromSeq === undefined) return undefined;
    let found: { attemptId: string; ids: TraceIds; status?: string } | undefined;
    for await (const e of this.store.readEvents(this.sessionId, { fromSeq })) {
      const p = e.payload as { runId?: unknown; attemptId?: unknown; trace?: TraceIds; status?: unknown };
      if (p.runId !== runId) continue;
      if (e.type === 'run/start') found = p.trace ? { attemptId: String(p.attemptId), ids: p.trace } : undefined;
      else if (e.type === 'run/end' && found && p.attemptId === found.attemptId) found.status = String(p.status);
    }
    return found;
  }

  /** The model wrapped: one span per call (each provider attempt, retries included). */
  traceModel(model: ModelProvider, pricing?: (usage: Usage, modelId: string) => string): ModelProvider {
    return traceModelCalls(this.t, this.clock, this.lastSeq, () => this.modelCallParent(), model, pricing);
  }
}
