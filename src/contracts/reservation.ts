import { z } from 'zod';
import type { LoopBudget } from './config.js';
import { addDecimal, decimalAtLeast, subDecimal } from './budget.js';
import type { Usage } from './message.js';

/**
 * A model call's worst case, reserved against the run's budgets before the call starts
 * (docs/guarantees.md, "Budgets"): the upper-bound estimate of its input tokens, its output cap,
 * and (with `pricing`) the two priced.
 */
export interface Reservation {
  inputTokens: number;
  outputTokens: number;
  cost?: string;
}

/** What the run's usage budgets have left (a field is absent when there is no such budget). */
export interface BudgetLeft {
  outputTokens?: number;
  cost?: string;
}

/** The reservation of one call, or the budget that cannot hold even its smallest worst case (one output token). */
export type Reserved =
  | { ok: true; reservation: Reservation /** The call's output cap (absent: no usage budget, no cap). */; cap?: number }
  | { ok: false; budget: 'maxOutputTokens' | 'maxCost'; reservation: Reservation; left: string };

/**
 * The worst case of a call over `inputTokens`, and its output cap: the largest the budgets leave
 * (no more than `ceiling`, the most a call may ask for). With a cost budget the cap is the largest
 * whose priced worst case fits what `maxCost` has left (a binary search; `price` is assumed not to
 * fall as output tokens grow). `price` may throw (the app's pricing): the caller's run fails.
 */
export function reserve(left: BudgetLeft, inputTokens: number, ceiling: number, price: ((u: Usage) => string) | undefined): Reserved {
  if (left.outputTokens !== undefined && left.outputTokens < 1) {
    return { ok: false, budget: 'maxOutputTokens', reservation: { inputTokens, outputTokens: 1 }, left: String(left.outputTokens) };
  }
  if (left.cost === undefined || !price) {
    if (left.outputTokens === undefined) return { ok: true, reservation: { inputTokens, outputTokens: 0 } };
    // the call's cap: what the budget leaves, never more than the model's own output ceiling (a failed
    // attempt then counts its ceiling, not the whole budget, and a retry still fits)
    const cap = Math.max(1, Math.min(ceiling, left.outputTokens));
    return { ok: true, reservation: { inputTokens, outputTokens: cap, ...pricedOrNot(price, inputTokens, cap) }, cap };
  }
  const budgetLeft = left.cost;
  const costOf = (outputTokens: number) => price({ inputTokens, outputTokens });
  const fits = (outputTokens: number) => decimalAtLeast(budgetLeft, costOf(outputTokens));
  if (!fits(1)) return { ok: false, budget: 'maxCost', reservation: { inputTokens, outputTokens: 1, cost: costOf(1) }, left: budgetLeft };
  let hi = Math.max(1, Math.min(ceiling, left.outputTokens ?? ceiling));
  if (!fits(hi)) {
    let lo = 1; // fits(lo), !fits(hi)
    while (hi - lo > 1) {
      const mid = lo + Math.floor((hi - lo) / 2);
      if (fits(mid)) lo = mid;
      else hi = mid;
    }
    hi = lo;
  }
  return { ok: true, reservation: { inputTokens, outputTokens: hi, cost: costOf(hi) }, cap: hi };
}

/**
 * A token budget's reservation priced too when there is `pricing` (no cost budget to hold it
 * against): what it counts at, live and in a recovery's fold alike. A price that throws or is no
 * decimal leaves it unpriced — no cost budget fails on it.
 */
function pricedOrNot(price: ((u: Usage) => string) | undefined, inputTokens: number, outputTokens: number): { cost?: string } {
  if (!price) return {};
  try {
    return { cost: price({ inputTokens, outputTokens }) };
  } catch {
    return {};
  }
}

/** What `budget` has left after `spent` (its reported usage and cost, plus what is counted at reservation). */
export function budgetLeft(budget: LoopBudget, spent: { outputTokens: number; cost: string }): BudgetLeft {
  return {
    ...(budget.maxOutputTokens !== undefined ? { outputTokens: Math.max(0, budget.maxOutputTokens - spent.outputTokens) } : {}),
    ...(budget.maxCost !== undefined ? { cost: subDecimal(budget.maxCost, spent.cost) } : {}),
  };
}

/** What a call whose usage never came back counts: its reservation (output tokens and cost). */
export interface Counted {
  outputTokens: number;
  cost: string;
}

export const noneCounted = (): Counted => ({ outputTokens: 0, cost: '0' });

export const addCounted = (a: Counted, r: { outputTokens: number; cost?: string }): Counted => ({
  outputTokens: a.outputTokens + r.outputTokens,
  cost: r.cost ? addDecimal(a.cost, r.cost) : a.cost,
});

/**
 * A call's reported usage above its reservation: recorded in the log, named on the result (as
 * `result.spending.overruns` and an agent call's `outcome.overruns`).
 */
export const Overrun = z.object({
  /** The step of the run that made the call: the child's, with `session`. */
  step: z.number().int().nonnegative(),
  /** The child session whose run made the call (an agent call's overrun in its parent), absent for the run's own. */
  session: z.string().optional(),
  /** Reported input tokens above the estimate. */
  inputTokens: z.object({ estimated: z.number(), reported: z.number() }).optional(),
  /** Reported output tokens above the call's cap. */
  outputTokens: z.object({ cap: z.number(), reported: z.number() }).optional(),
  /** The reported usage priced above the reservation's cost. */
  cost: z.object({ reserved: z.string(), reported: z.string() }).optional(),
});
export type Overrun = z.infer<typeof Overrun>;

/** The overrun of a call reserved as `r` that reported `usage` priced `cost`, or undefined. */
export function overrunOf(
  step: number,
  r: Reservation,
  capped: boolean,
  usage: Usage | undefined,
  cost: string | undefined,
): Overrun | undefined {
  if (!usage) return undefined;
  const o: Overrun = { step };
  if (usage.inputTokens > r.inputTokens) o.inputTokens = { estimated: r.inputTokens, reported: usage.inputTokens };
  if (capped && usage.outputTokens > r.outputTokens) o.outputTokens = { cap: r.outputTokens, reported: usage.outputTokens };
  if (r.cost !== undefined && cost !== undefined && !decimalAtLeast(r.cost, cost)) o.cost = { reserved: r.cost, reported: cost };
  return o.inputTokens || o.outputTokens || o.cost ? o : undefined;
}
