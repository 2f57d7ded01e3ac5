import type { ModelResponse } from '../contracts/model.js';
import { CancelledError, isCancelledError, isProviderError, ProviderError } from '../contracts/errors.js';
import { onAbort } from '../contracts/abort.js';
import { ProviderRateLimits, type CallPermit } from '../contracts/rate-limits.js';
import type { SessionServices } from './session-services.js';
import type { Clock } from '../contracts/clock.js';
import { isStoppedWaiting } from './wait-stops.js';

/** What the limiter reads of a call (call-model.ts's CallSpec has it). */
export interface RateLimitedCall {
  /** The request's input tokens, estimated once for the call (the budget's reservation reads the same). */
  inputTokens: number;
  maxOutputTokens?: number;
  deadlineAt?: number;
}

/**
 * Waits for the runtime's rate limits (docs/rate-limits.md) before one model attempt: the call's
 * input estimate (as the surface counts them, plus its tools' specs) and its output cap
 * reserved (`maxOutputTokens`, else `config.outputReserve`). A wait is shown live
 * (`rate_limit_wait`, `waiting` then `granted`); it ends early, rejecting with CancelledError,
 * when `signal` aborts. Undefined: no limit applies.
 */
export async function awaitRateLimit(
  env: SessionServices,
  step: number,
  spec: RateLimitedCall,
  signal: AbortSignal,
  emit: SessionServices['emit'],
): Promise<CallPermit | undefined> {
  const limiter = env.rateLimiter;
  if (!limiter) return undefined;
  const demand = {
    sessionId: env.sessionId,
    ...(env.model.providerName !== undefined ? { provider: env.model.providerName } : {}),
    model: env.model.modelId,
    inputTokens: spec.inputTokens,
    outputTokens: spec.maxOutputTokens ?? env.config.outputReserve,
  };
  let since: number | undefined;
  let limit = '';
  if (signal.aborted) throw new CancelledError('model call cancelled');
  // the run's maxDurationMs ends the wait too (the run then ends budget_exhausted)
  const deadline = new AbortController();
  const off = onAbort(signal, (reason) => deadline.abort(reason));
  const offStop = env.waitStops ? onAbort(env.waitStops.signal, (reason) => deadline.abort(reason)) : () => {};
  const at = spec.deadlineAt;
  const timer =
    at === undefined ? undefined : env.clock.setTimeout(() => deadline.abort(new RateLimitDeadline(at)), Math.max(0, at - env.clock.now()));
  try {
    const permit = await limiter.acquire(demand, deadline.signal, (w) => {
      since = env.clock.now();
      limit = w.limit;
      emit({ type: 'rate_limit_wait', step, state: 'waiting', limit, ahead: w.ahead });
    });
    if (since !== undefined) emit({ type: 'rate_limit_wait', step, state: 'granted', limit, waitedMs: env.clock.now() - since });
    return permit;
  } catch (e) {
    if (!signal.aborted && (isRateLimitDeadline(deadline.signal.reason) || isStoppedWaiting(deadline.signal.reason)))
      throw deadline.signal.reason;
    if (signal.aborted || isCancelledError(e)) throw e;
    // the shared buckets could not be read (a PostgreSQL error): nothing was sent — a retryable
    // attempt that counts nothing (call-budget.ts), as a provider's rate_limit refusal
    throw new ProviderError(`the rate limiter's buckets could not be read: ${(e as Error)?.message ?? String(e)}`, {
      retryable: true,
      code: 'rate_limit_backend',
      cause: e,
    });
  } finally {
    off();
    offStop();
    if (timer !== undefined) env.clock.clearTimeout(timer);
  }
}

/**
 * The run's maxDurationMs ran out (at `at`) while a model call waited for its rate limit (nothing
 * sent) or was under way (cut: `cutAtDeadline`): the run ends budget_exhausted naming maxDurationMs.
 */
export class RateLimitDeadline extends Error {
  override readonly name = 'RateLimitDeadline';
  constructor(
    readonly at: number,
    message = 'the run used its maxDurationMs waiting for a rate limit',
  ) {
    super(message);
  }
}

/** Aborts `call` with a RateLimitDeadline when the runtime's clock reaches `at`; returns the disarm. */
export function cutAtDeadline(clock: Clock, call: AbortController, at: number): () => void {
  const cut = () => call.abort(new RateLimitDeadline(at, "the run's maxDurationMs ran out during its model call, which was cut"));
  const timer = clock.setTimeout(cut, Math.max(0, at - clock.now()));
  return () => clock.clearTimeout(timer);
}
export const isRateLimitDeadline = (e: unknown): e is RateLimitDeadline => e instanceof RateLimitDeadline;

/**
 * Gives the attempt's permit back: settled to the usage reported, paused by a 429's retry-after,
 * and told the provider's own limits from the response's (or the refusal's) rate headers.
 */
export function releaseRateLimit(permit: CallPermit | undefined, res: ModelResponse | undefined, error?: unknown): void {
  if (!permit) return;
  const pe = isProviderError(error) ? error : undefined;
  const pauseMs = pe?.providerCode === 'rate_limit' ? pe.retryAfterMs : undefined;
  // the response is not checked yet (a custom provider's): its usage only if it is numbers, its limits only if well-formed
  const u = res?.usage;
  const usage = u && Number.isFinite(u.inputTokens) && Number.isFinite(u.outputTokens) ? { usage: u } : {};
  const limits = ProviderRateLimits.safeParse(res ? res.providerLimits : pe?.providerLimits);
  permit.done({
    ...usage,
    ...(pauseMs !== undefined ? { pauseMs } : {}),
    ...(limits.success && limits.data ? { providerLimits: limits.data } : {}),
  });
}
