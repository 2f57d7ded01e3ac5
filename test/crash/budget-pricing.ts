import type { Usage } from '../../src/contracts/message.js';

/** 0.0001 an input token, 0.001 an output token, as an exact decimal string. */
export function tokenPrice(u: Usage): string {
  const n = u.inputTokens + 10 * u.outputTokens;
  return `${Math.floor(n / 10_000)}.${String(n % 10_000).padStart(4, '0')}`;
}

/** The runtime options of test/crash/budget-child.ts: a call reserves at most 200 output tokens (0.2 and its input). */
export const BUDGET_CHILD_OPTIONS = {
  pricing: tokenPrice,
  budget: { maxCost: '1' },
  config: { outputReserve: 200, retryBackoffMs: 1 },
};
