import type { Clock } from '../contracts/clock.js';
import type { ModelProvider } from '../contracts/model.js';
import type { Usage } from '../contracts/message.js';
import { isDecimal } from '../contracts/config.js';
import type { Attributes, SpanLike } from '../contracts/tracing.js';
import type { Tracing } from './tracing-options.js';

const STATUS_ERROR = 2;
const KIND_CLIENT = 2;

/**
 * The call's cost (`pricing` of its usage, a decimal string) as `actorloop.model_call.cost`; none
 * without pricing or usage, or when pricing throws or answers no decimal (the run reports that itself).
 */
function costAttribute(
  pricing: ((usage: Usage, modelId: string) => string) | undefined,
  usage: Usage | undefined,
  modelId: string,
): Attributes {
  if (!pricing || !usage) return {};
  try {
    const cost: unknown = pricing(usage, modelId);
    return isDecimal(cost) ? { 'actorloop.model_call.cost': cost } : {};
  } catch {
    return {};
  }
}

const errorMessage = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** What a model call's span takes from the attempt under way (its span's context, and its step's when one is open). */
export interface ModelCallParent {
  ctx: unknown;
  base: Attributes;
  step?: { ctx: unknown; n: number };
  /** The attempt's model calls so far (counted here). */
  modelCalls: number;
}

/**
 * The model wrapped: one `chat` span per call (each provider attempt, retries included), under
 * the step of the attempt under way; with no attempt traced, the call goes through untouched.
 * Every failure of the tracing API is swallowed: tracing never changes the call.
 */
export function traceModelCalls(
  t: Tracing,
  clock: Clock,
  lastSeq: () => number,
  attempt: () => ModelCallParent | undefined,
  model: ModelProvider,
  pricing?: (usage: Usage, modelId: string) => string,
): ModelProvider {
  return {
    modelId: model.modelId,
    ...(model.maxOutputTokens !== undefined ? { maxOutputTokens: model.maxOutputTokens } : {}),
    ...(model.providerName !== undefined ? { providerName: model.providerName } : {}),
    ...(model.structuredOutput !== undefined ? { structuredOutput: model.structuredOutput } : {}),
    ...(model.contentSupport !== undefined ? { contentSupport: model.contentSupport } : {}),
    async call(request, onEvent) {
      const a = attempt();
      if (!a) return model.call(request, onEvent);
      let span: SpanLike | undefined;
      try {
        a.modelCalls++;
        span = t.tracer.startSpan(
          `chat ${model.modelId}`,
          {
            kind: KIND_CLIENT,
            startTime: clock.now(),
            attributes: {
              ...a.base,
              'gen_ai.operation.name': 'chat',
              'gen_ai.request.model': model.modelId,
              // Required by the GenAI conventions; a provider that does not say gets none (never a guess)
              ...(model.providerName !== undefined ? { 'gen_ai.provider.name': model.providerName } : {}),
              'actorloop.model_call.attempt': a.modelCalls,
              'actorloop.log.seq': lastSeq(),
              ...(a.step ? { 'actorloop.step': a.step.n } : {}),
              ...(request.maxOutputTokens !== undefined ? { 'gen_ai.request.max_tokens': request.maxOutputTokens } : {}),
              ...(t.recordContent ? { 'gen_ai.input.messages': JSON.stringify(request.messages) } : {}),
            },
          },
          a.step?.ctx ?? a.ctx,
        );
      } catch {
        span = undefined;
      }
      if (!span) return model.call(request, onEvent);
      const s = span;
      try {
        const res = await t.api.context.with(t.api.trace.setSpan(a.step?.ctx ?? a.ctx, s), () => model.call(request, onEvent));
        try {
          s.setAttributes({
            'gen_ai.response.finish_reasons': [res.finishReason],
            ...(res.usage
              ? { 'gen_ai.usage.input_tokens': res.usage.inputTokens, 'gen_ai.usage.output_tokens': res.usage.outputTokens }
              : {}),
            ...costAttribute(pricing, res.usage, model.modelId),
            ...(t.recordContent ? { 'gen_ai.output.messages': JSON.stringify([res.message]) } : {}),
          });
          s.end(clock.now());
        } catch {
          // tracing never changes the call
        }
        return res;
      } catch (e) {
        try {
          const code =
            (e as { providerCode?: unknown; name?: unknown } | undefined)?.providerCode ?? (e as { name?: unknown } | undefined)?.name;
          s.setAttribute('error.type', typeof code === 'string' && code ? code : 'error');
          s.recordException(e instanceof Error ? e : { name: 'Error', message: errorMessage(e) });
          s.setStatus({ code: STATUS_ERROR, message: errorMessage(e) });
          s.end(clock.now());
        } catch {
          // tracing never changes the call
        }
        throw e;
      }
    },
  };
}
