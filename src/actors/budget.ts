import type { LoopBudget } from '../contracts/config.js';
import type { Usage } from '../contracts/message.js';

const SCALE = 10n ** 18n;

/** Exact decimal strings as scaled bigints (18 places), so cost budgets never drift. */
export function parseDecimal(s: string): bigint {
  const m = /^(\d+)(?:\.(\d+))?$/.exec(s.trim());
  if (!m) throw new Error(`not a decimal string: ${JSON.stringify(s)}`);
  const frac = (m[2] ?? '').slice(0, 18).padEnd(18, '0');
  return BigInt(m[1]!) * SCALE + BigInt(frac);
}

export function formatDecimal(v: bigint): string {
  const whole = v / SCALE;
  const frac = (v % SCALE).toString().padStart(18, '0').replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : `${whole}`;
}

export const addDecimal = (a: string, b: string): string => formatDecimal(parseDecimal(a) + parseDecimal(b));

export interface BudgetUse {
  steps: number;
  toolCalls: number;
  usage: Usage;
  cost: string;
  recoveries: number;
  startedAt: number;
}

/** The first spent budget, checked after every step (DESIGN §4 item 8), or undefined. */
export function spentBudget(b: LoopBudget, u: BudgetUse, now: number): { budget: string; limit: string; used: string } | undefined {
  if (u.steps >= b.maxSteps) return { budget: 'maxSteps', limit: String(b.maxSteps), used: String(u.steps) };
  if (b.maxToolCalls !== undefined && u.toolCalls >= b.maxToolCalls)
    return { budget: 'maxToolCalls', limit: String(b.maxToolCalls), used: String(u.toolCalls) };
  if (b.maxOutputTokens !== undefined && u.usage.outputTokens >= b.maxOutputTokens)
    return { budget: 'maxOutputTokens', limit: String(b.maxOutputTokens), used: String(u.usage.outputTokens) };
  if (b.maxCost !== undefined && parseDecimal(u.cost) >= parseDecimal(b.maxCost)) return { budget: 'maxCost', limit: b.maxCost, used: u.cost };
  if (u.recoveries > b.maxRecoveries) return { budget: 'maxRecoveries', limit: String(b.maxRecoveries), used: String(u.recoveries) };
  if (b.maxDurationMs !== undefined && now - u.startedAt >= b.maxDurationMs)
    return { budget: 'maxDurationMs', limit: String(b.maxDurationMs), used: String(now - u.startedAt) };
  return undefined;
}
