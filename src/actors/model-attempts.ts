import type { StepPosition } from '../contracts/calls.js';
import { sleepOn } from '../contracts/clock.js';
import { CancelledError, isCancelledError, isProviderError, ProviderError } from '../contracts/errors.js';
import type { Message } from '../contracts/message.js';
import { ModelResponseSchema, type ModelRequest, type ModelRequestOutput, type ModelResponse } from '../contracts/model.js';
import { resolveMessages } from '../persistence/content-parts.js';
import { onAbort } from '../contracts/abort.js';
import { redactSecrets } from '../providers/redact.js';
import { priceOf } from './pricing.js';
import { BudgetRefusal, countedAt, countsNothing, pricedUsage } from './call-budget.js';
import { tightest, type PoolHold } from './budget-pool.js';
import { subDecimal } from '../contracts/budget.js';
import { messageOf } from './tool-call.js';
import { addCounted, noneCounted, reserve, type BudgetLeft, type Counted, type Reservation } from '../contracts/reservation.js';
import { awaitRateLimit, cutAtDeadline, isRateLimitDeadline, RateLimitDeadline, releaseRateLimit } from './rate-limit-call.js';
import { isStoppedWaiting } from './wait-stops.js';
import type { CallPermit } from '../contracts/rate-limits.js';
import type { OfferedTools, SessionServices } from './session-services.js';

/**
 * A model call's attempts (call-model.ts's step call and compaction.ts's summary call): each
 * reserves its worst case, waits for its rate limit, is sent, and — failed — is recorded and
 * retried as the runtime's config says.
 */

/** One model request as callWithRetries sends it. */
export interface CallSpec {
  messages: readonly Message[];
  tools: OfferedTools['specs'];
  digest: string;
  maxOutputTokens?: number;
  /** Stream the answer's deltas to subscribers (the step's own call; not a compaction's summary). */
  live: boolean;
  /** Where the call's live events go (default `env.emit`). */
  emit?: SessionServices['emit'];
  /** The run's output schema, as the request carries it (the step's call; not a compaction's). */
  output?: ModelRequestOutput;
  /** The request's input tokens, estimated once for the call: every attempt's reservation and rate-limit demand. */
  inputTokens: number;
  /**
   * What the run's usage budgets have left (absent: it has none): each attempt reserves its worst
   * case first — against these and against what its ancestors' pools leave (a sub-agent's,
   * docs/agents.md) — its output cap set from what is left, or starts no call.
   */
  budget?: { left?: BudgetLeft };
  /** When the run's maxDurationMs runs out: a wait for a rate limit ends then (RateLimitDeadline). */
  deadlineAt?: number;
  /** Counts a failed attempt's reservation in the run at once, as it fails (the actor sends it to its run). */
  count?: CountAttempt;
}

/** What a model call reports each failed attempt counted at its reservation to. */
export type CountAttempt = (counted: Counted) => void;

/** What a call's actor sends its run for a failed attempt counted at its reservation (counted in the run's spending at once). */
export type AttemptCounted = { type: 'model.attemptCounted'; counted: Counted };
export const attemptCounted = (counted: Counted): AttemptCounted => ({ type: 'model.attemptCounted', counted });

/** A model call's settled answer (callWithRetries). */
export interface CalledModel {
  res: ModelResponse;
  latencyMs: number;
  digest: string;
  reserved?: Reservation;
  capped: boolean;
  /** The reported usage priced (with `pricing`). */
  cost?: string;
  /** The app's pricing threw or answered no decimal for the reported usage (the run fails with it). */
  pricingError?: unknown;
}

/**
 * Calls the model with the runtime's retries (DESIGN §4 item 2): each failed attempt is staged as
 * `assistant/attempt`, and every response is checked (a bad one is a non-retryable ProviderError).
 * The step's call and a compaction's summary call both go through here.
 */
export async function callWithRetries(env: SessionServices, at: StepPosition, signal: AbortSignal, spec: CallSpec): Promise<CalledModel> {
  const { digest, live } = spec;
  // blob references read back as bytes once per call, not per retry (text only: the same array)
  const messages = await resolveMessages(spec.messages, env.blobs);
  const emit = spec.emit ?? env.emit;
  // a sub-agent's: what its ancestors' budgets leave, shared live with its sibling sub-agents
  const pool = spec.budget ? env.budgets?.above() : undefined;
  let counted = noneCounted();
  for (let n = 1; ; n++) {
    // the attempt's worst case, reserved from what the budgets have left after the step's failed
    // attempts (and, in a pool, held there before any await: a sibling's call sees it at once)
    let reserved: Reservation | undefined;
    let hold: PoolHold | undefined;
    let cap = spec.maxOutputTokens;
    if (spec.budget && (spec.budget.left || pool)) {
      const own = spec.budget.left;
      const { left, owners } = tightest(
        own && {
          ...(own.outputTokens !== undefined ? { outputTokens: own.outputTokens - counted.outputTokens } : {}),
          ...(own.cost !== undefined ? { cost: subDecimal(own.cost, counted.cost) } : {}),
        },
        pool?.available(),
      );
      const r = reserve(
        left,
        spec.inputTokens,
        env.model.maxOutputTokens ?? env.config.outputReserve,
        env.pricing ? (u) => priceOf(env, u) : undefined,
      );
      if (!r.ok) throw new BudgetRefusal(r.budget, r.reservation, owners.get(r.budget));
      reserved = r.reservation;
      hold = pool?.hold(reserved);
      if (r.cap !== undefined) cap = Math.min(cap ?? r.cap, r.cap);
    }
    let t0 = env.clock.now(); // the runtime's clock: a simulated run logs simulated latencies
    let started = false;
    let streamed = '';
    // what this attempt streamed is never committed: close it as discarded so clients drop it
    const discard = (reason: string) => {
      if (started)
        emit({ type: 'message_end', role: 'assistant', message: { role: 'assistant', content: streamed }, discarded: { reason } });
    };
    // a retry gets a signal of its own (following the step's): an SDK that leaves its abort
    // listener on the request's signal must not pile one up per attempt
    let attempt: AbortController | undefined;
    let offAttempt = () => {};
    if (n > 1 || spec.deadlineAt !== undefined) {
      const own = new AbortController();
      attempt = own;
      const off = onAbort(signal, (reason) => own.abort(reason));
      // the run's maxDurationMs cuts the call under way too (the run ends budget_exhausted)
      const offDeadline = spec.deadlineAt === undefined ? () => {} : cutAtDeadline(env.clock, own, spec.deadlineAt);
      offAttempt = () => {
        off();
        offDeadline();
      };
    }
    const callSignal = attempt?.signal ?? signal;
    let permit: CallPermit | undefined;
    let refused: unknown;
    let sent = false;
    try {
      // the output it reserves is the attempt's cap (what the budgets leave), not only the run's
      permit = await awaitRateLimit(env, at.step, cap === undefined ? spec : { ...spec, maxOutputTokens: cap }, callSignal, emit);
      t0 = env.clock.now(); // a wait for the rate limit is not the call's latency
      const request: ModelRequest = { messages, tools: spec.tools, signal: callSignal };
      if (cap !== undefined) request.maxOutputTokens = cap;
      if (env.inFlight && reserved) env.inFlight.reservation = reserved;
      if (spec.output) request.output = spec.output;
      // the last checks before the request, after the last await: the run's maxDurationMs ran out
      // (during a retry's backoff, say) — nothing is sent —, or a writer that no longer holds its
      // session (fenced, its lease lost — a child session's: its parent's — or closed) sends none
      if (spec.deadlineAt !== undefined && env.clock.now() >= spec.deadlineAt)
        throw new RateLimitDeadline(spec.deadlineAt, "the run's maxDurationMs ran out before its model call was sent");
      refused = env.writer.effectRefusal();
      if (refused !== undefined) throw refused;
      sent = true;
      const res = await env.model.call(request, (e) => {
        if (e.type !== 'text_delta' || !live || signal.aborted) return;
        if (!started) emit({ type: 'message_start', role: 'assistant' });
        started = true;
        streamed += e.text;
        emit({ type: 'message_delta', role: 'assistant', text: e.text });
      });
      releaseRateLimit(permit, res);
      // stopped while the provider answered (a cancel): nothing of this call is staged
      if (signal.aborted) throw new CancelledError('model call cancelled');
      const checked = checkedResponse(res);
      if (!checked.success) {
        const issue = checked.error.issues[0];
        throw new ProviderError(
          `the model provider returned an invalid response: ` +
            `${issue ? `${issue.path.map(String).join('.') || '(root)'}: ${issue.message}` : 'invalid'}`,
          { retryable: false, code: 'invalid_response' },
        );
      }
      offAttempt();
      if (env.inFlight) delete env.inFlight.reservation;
      const answer = checked.data as ModelResponse;
      const priced = pricedUsage(env, answer.usage);
      // the pool's hold settles with the reported usage priced (at its reservation if the app's pricing threw)
      // at its reservation when the app's pricing threw or the provider reported no usage (never at zero)
      hold?.settle(
        reserved && ('pricingError' in priced || !answer.usage)
          ? countedAt(reserved)
          : { outputTokens: answer.usage?.outputTokens ?? 0, cost: ('cost' in priced && priced.cost) || '0' },
      );
      const settled = { latencyMs: env.clock.now() - t0, digest, capped: cap !== undefined, ...priced };
      return { res: answer, ...settled, ...(reserved ? { reserved } : {}) };
    } catch (e) {
      offAttempt();
      if (env.inFlight) delete env.inFlight.reservation;
      releaseRateLimit(permit, undefined, e);
      // cut by the run's maxDurationMs: before its rate limit let it go (nothing sent), or under way
      const cut = isRateLimitDeadline(callSignal.reason) && !signal.aborted ? callSignal.reason : undefined;
      if (isRateLimitDeadline(e) || isStoppedWaiting(e) || (refused !== undefined && e === refused) || (cut && !sent)) {
        hold?.settle(noneCounted());
        // nothing was sent: no attempt to record (the step's failed ones were counted as they failed)
        throw cut ?? e;
      }
      if (!cut && (signal.aborted || isCancelledError(e))) {
        hold?.settle(noneCounted()); // a cancelled call counts nothing, in its run as in the pool
        discard('model call cancelled');
        throw new CancelledError('model call cancelled');
      }
      // cut under way: sent, so recorded and counted as a failed attempt; the run ends budget_exhausted
      const pe = cut
        ? new ProviderError(cut.message, { retryable: false, code: 'deadline', partialOutput: started })
        : isProviderError(e)
          ? e
          : new ProviderError(`model call failed: ${redactSecrets((e as Error)?.message ?? String(e))}`, {
              retryable: false,
              code: 'unknown',
              cause: e,
            });
      // a call whose usage never came back counts at its reservation, never at zero
      const countsReservation = reserved !== undefined && !countsNothing(pe);
      if (countsReservation) {
        counted = addCounted(counted, reserved!);
        // the run counts it now, as data: a cancel during the backoff below stops this call, not the count
        spec.count?.(countedAt(reserved!));
      }
      hold?.settle(countsReservation ? countedAt(reserved!) : noneCounted());
      env.writer.stage('assistant/attempt', at, {
        attemptNumber: n,
        ...(reserved ? { reserved, counted: countsReservation ? 'reservation' : 'nothing' } : {}),
        requestDigest: digest,
        latencyMs: env.clock.now() - t0,
        error: {
          name: pe.name,
          message: redactSecrets(pe.message),
          code: pe.providerCode,
          retryable: pe.retryable,
          partialOutput: pe.partialOutput,
        },
      });
      discard(`model attempt ${n} failed: ${pe.message}${pe.retryable && n < env.config.maxProviderAttempts ? ' (retrying)' : ''}`);
      // no retry once the previous step's results failed to land (callModel then fails with that error)
      if (!pe.retryable || n >= env.config.maxProviderAttempts || env.writer.aheadFailure) {
        throw cut ?? pe;
      }
      const left = spec.deadlineAt === undefined ? Infinity : Math.max(0, spec.deadlineAt - env.clock.now());
      const wanted = Math.min(env.config.maxRetryDelayMs, pe.retryAfterMs ?? env.config.retryBackoffMs * 2 ** (n - 1));
      await sleepOn(env.clock, Math.min(wanted, left), signal, () => new CancelledError('model call cancelled'));
      // a backoff that reaches the run's maxDurationMs ends there, and the next attempt is not sent —
      // decided by the backoff, not by the clock after it (a timer may fire a millisecond early)
      if (spec.deadlineAt !== undefined && left <= wanted)
        throw new RateLimitDeadline(spec.deadlineAt, "the run's maxDurationMs ran out before its model call was sent");
    }
  }
}

/**
 * A provider's response checked by ModelResponseSchema (its provider data must be JSON the log can
 * hold: no BigInt, no cycle); a getter that throws while it is read is an issue too.
 */
function checkedResponse(
  res: unknown,
): { success: true; data: unknown } | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } } {
  try {
    return ModelResponseSchema.safeParse(res);
  } catch (e) {
    return { success: false, error: { issues: [{ path: [], message: `reading it threw: ${messageOf(e)}` }] } };
  }
}
