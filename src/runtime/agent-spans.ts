import type { ExecutionResult } from '../contracts/requests.js';
import type { Attributes, SpanContextLike, SpanLike, TraceIds } from '../contracts/tracing.js';
import type { Tracing } from './tracing-options.js';

const STATUS_ERROR = 2;
const KIND_INTERNAL = 0;

/**
 * Why a span ends without an outcome (status ERROR, with this `error.type`): the session closed,
 * a new attempt started before this one reported its end, or the step ended first.
 */
export interface Unfinished {
  type: 'closed' | 'interrupted' | 'no_outcome';
  message: string;
}

export const STEP_ENDED: Unfinished = { type: 'no_outcome', message: 'the step ended before the call reported an outcome' };
export const INTERRUPTED: Unfinished = { type: 'interrupted', message: 'the attempt ended without a result' };
export const CLOSED: Unfinished = { type: 'closed', message: 'the session closed before the attempt ended' };

/** Ends `span` with status ERROR and `error.type` (the GenAI conventions require it on a span that ends in error). */
export function endUnfinished(span: SpanLike, why: Unfinished, now: number): void {
  span.setAttribute('error.type', why.type);
  span.setStatus({ code: STATUS_ERROR, message: why.message });
  span.end(now);
}

type Link = { context: SpanContextLike; attributes?: Attributes };

/** An attempt's link to the run's attempt before it (docs/integrations.md, "Attempts are linked"). */
export function previousAttemptLink(previous: { attemptId: string; ids: TraceIds; status?: string }): Link {
  return {
    context: { traceId: previous.ids.traceId, spanId: previous.ids.spanId, traceFlags: 1, isRemote: true },
    attributes: {
      'actorloop.link': 'previous_attempt',
      'actorloop.previous_attempt.id': previous.attemptId,
      'actorloop.previous_attempt.status': previous.status ?? 'interrupted',
    },
  };
}

/**
 * Opens an agent's `invoke_agent {gen_ai.agent.name}` span (GenAI conventions, internal kind):
 * an attempt's, named after the agent it starts with, or that of an agent handed to.
 */
export function startAgentSpan(
  t: Tracing,
  agent: string,
  o: { startTime: number; attributes: Attributes; links?: Link[]; ctx: unknown },
): SpanLike {
  return t.tracer.startSpan(
    `invoke_agent ${agent}`,
    {
      kind: KIND_INTERNAL,
      startTime: o.startTime,
      attributes: { ...o.attributes, 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': agent },
      ...(o.links ? { links: o.links } : {}),
    },
    o.ctx,
  );
}

/**
 * Ends an attempt's span with its result: the run's status, outcome and totals (every agent's,
 * handoffs included); an error as status ERROR with `error.type` (the error kind) and an
 * `exception` event (the typed cause).
 */
export function endAttemptSpan(span: SpanLike, result: ExecutionResult, now: number): void {
  span.setAttributes({
    'actorloop.run.status': result.status,
    'actorloop.run.outcome': result.outcome,
    'gen_ai.usage.input_tokens': result.usage.inputTokens,
    'gen_ai.usage.output_tokens': result.usage.outputTokens,
  });
  if (result.error) {
    span.setAttribute('error.type', result.error.kind);
    span.recordException(
      result.error.cause instanceof Error ? result.error.cause : { name: result.error.kind, message: result.error.message },
      now,
    );
    span.setStatus({ code: STATUS_ERROR, message: result.error.message });
  }
  span.end(now);
}

/**
 * Ends the span of an agent handed to as its attempt ends: the result's error as status ERROR with
 * `error.type` (its exception event is the attempt's), or without a result `why`.
 */
export function endHandoffSpan(span: SpanLike, result: ExecutionResult | undefined, why: Unfinished, now: number): void {
  if (!result) return endUnfinished(span, why, now);
  if (result.error) {
    span.setAttribute('error.type', result.error.kind);
    span.setStatus({ code: STATUS_ERROR, message: result.error.message });
  }
  span.end(now);
}
