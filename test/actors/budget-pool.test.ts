import { describe, expect, it } from 'vitest';
import { BudgetPool, SessionBudgets, tightest } from '../../src/actors/budget-pool.js';

// The pools sub-agents spend from (docs/agents.md, "Budgets"): pure bookkeeping, tested without actors.

describe('budget pools', () => {
  it("a hold in a child's pool counts at every level above until it settles, with what the call spent", () => {
    const root = new BudgetPool('s', { cost: '1', outputTokens: 100 });
    const child = new BudgetPool('s/r/1/c1', { cost: '0.5' }, root);
    const hold = child.hold({ outputTokens: 40, cost: '0.4' });
    expect(root.available()).toEqual({ outputTokens: { left: 60, owner: 's' }, cost: { left: '0.6', owner: 's' } });
    expect(child.available()).toEqual({ outputTokens: { left: 60, owner: 's' }, cost: { left: '0.1', owner: 's/r/1/c1' } });
    hold.settle({ outputTokens: 10, cost: '0.1' });
    hold.settle({ outputTokens: 10, cost: '0.1' }); // once only
    expect(root.available()).toEqual({ outputTokens: { left: 90, owner: 's' }, cost: { left: '0.9', owner: 's' } });
    expect(root.using()).toEqual({ outputTokens: 10, cost: '0.1' });
  });

  it("siblings share their parent's remaining: what one holds, the other cannot take; a charge (recorded spending) counts as spent", () => {
    const parent = new BudgetPool('s', { cost: '1' });
    parent.hold({ outputTokens: 5, cost: '0.7' });
    parent.charge({ outputTokens: 0, cost: '0.25' });
    expect(parent.available().cost).toEqual({ left: '0.05', owner: 's' });
    parent.charge({ outputTokens: 0, cost: '1' });
    expect(parent.available().cost).toEqual({ left: '0', owner: 's' });
  });

  it("the tightest of a run's own budgets and its pools names the ancestor whose budget binds (its own on a tie)", () => {
    const above = { cost: { left: '0.2', owner: 's' }, outputTokens: { left: 50, owner: 's' } };
    expect(tightest({ cost: '0.5', outputTokens: 50 }, above)).toEqual({
      left: { cost: '0.2', outputTokens: 50 },
      owners: new Map([['maxCost', 's']]),
    });
    expect(tightest(undefined, above).left).toEqual({ cost: '0.2', outputTokens: 50 });
    expect(tightest({ cost: '0.1' }, undefined)).toEqual({ left: { cost: '0.1' }, owners: new Map() });
  });

  it("a session's batch pool is made once per batch, chained to the pool it spends from, and none without any usage budget", () => {
    let above: BudgetPool | undefined;
    const budgets = new SessionBudgets('s/r/1/c1', () => above);
    expect(budgets.forBatch('answer/1/1', undefined)).toBeUndefined();
    const first = budgets.forBatch('answer/1/2', { outputTokens: 10 });
    expect(budgets.forBatch('answer/1/2', { outputTokens: 99 })).toBe(first);
    above = new BudgetPool('s', { outputTokens: 5 });
    const next = budgets.forBatch('answer/1/3', undefined)!;
    expect(next).not.toBe(first);
    expect(next.available().outputTokens).toEqual({ left: 5, owner: 's' });
  });
});
