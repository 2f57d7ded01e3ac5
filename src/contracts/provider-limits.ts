import { z } from 'zod';

/** One of a provider's own limits as its response headers state it. */
const ProviderWindow = z.strictObject({
  /** What the limit has left (requests or tokens). */
  remaining: z.number().nonnegative().finite().optional(),
  /** Ms from the response until the limit is full again (OpenAI) or resets (Anthropic). */
  resetMs: z.number().nonnegative().finite().optional(),
});

/**
 * A provider's own rate limits, read from the rate headers of a response (or of a refusal):
 * OpenAI's `x-ratelimit-remaining-*` / `x-ratelimit-reset-*`, Anthropic's
 * `anthropic-ratelimit-*-remaining` / `-reset` (docs/rate-limits.md). Every field is optional: a
 * provider says what it knows.
 * @example
 * const limits: ProviderRateLimits = { requests: { remaining: 0, resetMs: 6_000 }, tokens: { remaining: 2_000 } }
 */
export const ProviderRateLimits = z.strictObject({
  requests: ProviderWindow.optional(),
  inputTokens: ProviderWindow.optional(),
  outputTokens: ProviderWindow.optional(),
  /** Input and output tokens together (OpenAI's tokens limit, Anthropic's combined one). */
  tokens: ProviderWindow.optional(),
});
export type ProviderRateLimits = z.infer<typeof ProviderRateLimits>;
