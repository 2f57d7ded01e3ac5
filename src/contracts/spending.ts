import { z } from 'zod';
import type { LoopBudget } from './config.js';
import { addDecimal, subDecimal } from './budget.js';
import { Overrun, type Counted } from './reservation.js';

/** One usage budget's figures: `spent` is reported usage, `reserved` what is counted at reservation, `remaining` what is left. */
export const BudgetSpending = z.object({ limit: z.string(), spent: z.string(), reserved: z.string(), remaining: z.string() });
export type BudgetSpending = z.infer<typeof BudgetSpending>;

/**
 * The run's spending per usage budget (docs/guarantees.md, "Budgets"), as `result.spending` and the
 * session snapshot show it; `overruns`: calls whose reported usage went above their reservation.
 */
export const Spending = z.object({
  maxCost: BudgetSpending.optional(),
  maxOutputTokens: BudgetSpending.optional(),
  overruns: z.array(Overrun).optional(),
});
export type Spending = z.infer<typeof Spending>;

function figures(limit: string, spent: string, reserved: string): BudgetSpending {
  return { limit, spent, reserved, remaining: subDecimal(limit, addDecimal(spent, reserved)) };
}

/**
 * `{ spending }` for a run under `budget` that spent `spent` (reported usage, priced) with `counted`
 * (calls counted at their reservation) and `held` (a call under way, reserved now); nothing when the
 * run has neither a cost nor an output-token budget and no overrun.
 */
export function spendingOf(
  budget: LoopBudget,
  spent: { outputTokens: number; cost: string },
  counted: Counted,
  overruns: readonly Overrun[],
  held?: { outputTokens: number; cost?: string },
): { spending?: Spending } {
  const reservedTokens = counted.outputTokens + (held?.outputTokens ?? 0);
  const reservedCost = held?.cost ? addDecimal(counted.cost, held.cost) : counted.cost;
  const s: Spending = {
    ...(budget.maxCost !== undefined ? { maxCost: figures(budget.maxCost, spent.cost, reservedCost) } : {}),
    ...(budget.maxOutputTokens !== undefined
      ? { maxOutputTokens: figures(String(budget.maxOutputTokens), String(spent.outputTokens), String(reservedTokens)) }
      : {}),
    ...(overruns.length > 0 ? { overruns: [...overruns] } : {}),
  };
  return s.maxCost || s.maxOutputTokens || s.overruns ? { spending: s } : {};
}
