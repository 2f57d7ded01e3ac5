import type { LoopBudget } from './config.js';
import type { Usage } from './message.js';

/** An exact decimal: `digits / 10^scale`. */
interface Dec {
  digits: bigint;
  scale: number;
}

/** Exact decimal strings at any number of places, so cost budgets never drift or round. */
function parseDecimal(s: string): Dec {
  const m = /^(\d+)(?:\.(\d+))?$/.exec(s.trim());
  if (!m) throw new Error(`not a decimal string: ${JSON.stringify(s)}`);
  const frac = m[2] ?? '';
  return { digits: BigInt(m[1]! + frac), scale: frac.length };
}

/** Both at the larger scale. */
function aligned(a: Dec, b: Dec): [bigint, bigint, number] {
  const scale = Math.max(a.scale, b.scale);
  return [a.digits * 10n ** BigInt(scale - a.scale), b.digits * 10n ** BigInt(scale - b.scale), scale];
}

function formatDecimal(digits: bigint, scale: number): string {
  if (scale === 0) return digits.toString();
  const text = digits.toString().padStart(scale + 1, '0');
  const whole = text.slice(0, text.length - scale);
  const frac = text.slice(text.length - scale).replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : whole;
}

export const addDecimal = (a: string, b: string): string => {
  const [x, y, scale] = aligned(parseDecimal(a), parseDecimal(b));
  return formatDecimal(x + y, scale);
};

/** a − b, exactly; never below zero (what a budget has left once it is overspent is nothing). */
export const subDecimal = (a: string, b: string): string => {
  const [x, y, scale] = aligned(parseDecimal(a), parseDecimal(b));
  return x > y ? formatDecimal(x - y, scale) : '0';
};

/** a ≥ b, exactly. */
export const decimalAtLeast = (a: string, b: string): boolean => {
  const [x, y] = aligned(parseDecimal(a), parseDecimal(b));
  return x >= y;
};

export interface BudgetUse {
  steps: number;
  toolCalls: number;
  usage: Usage;
  cost: string;
  /** Calls whose usage never came back, counted at their reservation. */
  counted?: { outputTokens: number; cost: string };
  recoveries: number;
  startedAt: number;
}

/** The first spent budget, checked after every step (DESIGN §4 item 8), or undefined. */
export function spentBudget(b: LoopBudget, u: BudgetUse, now: number): { budget: string; limit: string; used: string } | undefined {
  if (u.steps >= b.maxSteps) return { budget: 'maxSteps', limit: String(b.maxSteps), used: String(u.steps) };
  if (b.maxToolCalls !== undefined && u.toolCalls >= b.maxToolCalls)
    return { budget: 'maxToolCalls', limit: String(b.maxToolCalls), used: String(u.toolCalls) };
  const outputTokens = u.usage.outputTokens + (u.counted?.outputTokens ?? 0);
  if (b.maxOutputTokens !== undefined && outputTokens >= b.maxOutputTokens)
    return { budget: 'maxOutputTokens', limit: String(b.maxOutputTokens), used: String(outputTokens) };
  const cost = u.counted ? addDecimal(u.cost, u.counted.cost) : u.cost;
  if (b.maxCost !== undefined && decimalAtLeast(cost, b.maxCost)) return { budget: 'maxCost', limit: b.maxCost, used: cost };
  if (u.recoveries > b.maxRecoveries) return { budget: 'maxRecoveries', limit: String(b.maxRecoveries), used: String(u.recoveries) };
  if (b.maxDurationMs !== undefined && now - u.startedAt >= b.maxDurationMs)
    return { budget: 'maxDurationMs', limit: String(b.maxDurationMs), used: String(now - u.startedAt) };
  return undefined;
}
