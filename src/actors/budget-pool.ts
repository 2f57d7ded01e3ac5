import { addDecimal, decimalAtLeast, subDecimal } from '../contracts/budget.js';
import { addCounted, noneCounted, type BudgetLeft, type Counted } from '../contracts/reservation.js';
import type { ToolContext } from '../tools/define-tool.js';

/**
 * What a parent run's usage budgets leave for the sub-agents of one tool batch (docs/agents.md,
 * "Budgets"), shared by them live, in process: every model call of a child reserves its worst case
 * here (and at every ancestor's pool above) before it starts, and settles it with what it spent.
 * A pool is made when the batch's first agent call starts, from what the parent's run had left
 * then (the parent makes no model call while its batch runs), and is dropped with the batch: by
 * then each child's spending is in its call's result, and so in the parent's own figures.
 */
export class BudgetPool {
  /** Settled: reported usage priced, reservations of calls whose usage never came back, children's recorded spending. */
  private spent: Counted = noneCounted();
  /** Reserved by calls under way. */
  private held: Counted = noneCounted();

  constructor(
    /** The session whose budgets these are (named when a child's call is refused). */
    readonly owner: string,
    /** What the owner's run had left when its batch started (a field absent: no such budget). */
    private readonly cap: BudgetLeft,
    /** The pool the owner itself spends from (its own parent's batch), if it is a child. */
    private readonly up?: BudgetPool,
  ) {}

  /** The least any level leaves now, per budget, with the session whose budget it is (the nearest on a tie). */
  available(): PoolLeft {
    const above = this.up?.available() ?? {};
    const used = addCounted(this.spent, this.held);
    const out: PoolLeft = { ...above };
    if (this.cap.outputTokens !== undefined) {
      const left = Math.max(0, this.cap.outputTokens - used.outputTokens);
      if (!out.outputTokens || left <= out.outputTokens.left) out.outputTokens = { left, owner: this.owner };
    }
    if (this.cap.cost !== undefined) {
      const left = subDecimal(this.cap.cost, used.cost);
      if (!out.cost || decimalAtLeast(out.cost.left, left)) out.cost = { left, owner: this.owner };
    }
    return out;
  }

  /** Reserves `r` here and at every level above, until the hold is settled. */
  hold(r: { outputTokens: number; cost?: string }): PoolHold {
    const amount: Counted = { outputTokens: r.outputTokens, cost: r.cost ?? '0' };
    for (let p: BudgetPool | undefined = this; p; p = p.up) p.held = addCounted(p.held, amount);
    let settled = false;
    return {
      settle: (spent) => {
        if (settled) return;
        settled = true;
        for (let p: BudgetPool | undefined = this; p; p = p.up) {
          p.held = { outputTokens: p.held.outputTokens - amount.outputTokens, cost: subDecimal(p.held.cost, amount.cost) };
          p.spent = addCounted(p.spent, spent);
        }
      },
    };
  }

  /** Counts `a` (spending a child recorded before: an earlier life's calls) here and at every level above. */
  charge(a: Counted): void {
    if (a.outputTokens === 0 && a.cost === '0') return;
    for (let p: BudgetPool | undefined = this; p; p = p.up) p.spent = addCounted(p.spent, a);
  }

  /**
   * Takes back from every level above what this level counted as spent, and forgets it: a child's
   * try that ended without its answer (its next try opens the child again and counts what its log
   * holds, as its attempt starts).
   */
  retract(): void {
    const s = this.spent;
    this.spent = noneCounted();
    for (let p = this.up; p; p = p.up)
      p.spent = { outputTokens: p.spent.outputTokens - s.outputTokens, cost: subDecimal(p.spent.cost, s.cost) };
  }

  /** What the children spent and hold now at this level (the owner's snapshot shows it as reserved). */
  using(): Counted {
    return { outputTokens: this.spent.outputTokens + this.held.outputTokens, cost: addDecimal(this.spent.cost, this.held.cost) };
  }
}

/** What a pool's levels leave: per budget the least, and whose budget that is. */
export interface PoolLeft {
  outputTokens?: { left: number; owner: string };
  cost?: { left: string; owner: string };
}

/** A call's reservation held in a pool: settled once, with what the call spent (its reservation when its usage never came back). */
export interface PoolHold {
  settle(spent: Counted): void;
}

/**
 * A session's side of the pools: the pool its run spends from (`above`, set by its parent's call
 * while the child runs), and the pool of its current tool batch, made for the batch's first agent
 * call (`forBatch`).
 */
export class SessionBudgets {
  private batch: { key: string; pool: BudgetPool } | undefined;

  constructor(
    readonly sessionId: string,
    /** The pool this session's run spends from: its parent batch's, while its parent's call runs it. */
    readonly above: () => BudgetPool | undefined,
  ) {}

  /**
   * The pool of batch `key` (`<runId>/<runEpoch>/<step>`), made from `left` (what the run had left
   * when the batch started) on first use; undefined when neither this run nor an ancestor has a usage budget.
   */
  forBatch(key: string, left: BudgetLeft | undefined): BudgetPool | undefined {
    if (this.batch?.key === key) return this.batch.pool;
    const up = this.above();
    if (!left && !up) return undefined;
    this.batch = { key, pool: new BudgetPool(this.sessionId, left ?? {}, up) };
    return this.batch.pool;
  }

  /** What the current batch's children spent and hold (nothing when no batch pool is in use). */
  childrenUsing(): Counted | undefined {
    return this.batch?.pool.using();
  }
}

/** The least of a run's own budgets' `own` and the pools' `above`, and which session's budget binds each. */
export function tightest(own: BudgetLeft | undefined, above: PoolLeft | undefined): { left: BudgetLeft; owners: Map<string, string> } {
  const left: BudgetLeft = { ...own };
  const owners = new Map<string, string>();
  if (above?.outputTokens && (left.outputTokens === undefined || above.outputTokens.left < left.outputTokens)) {
    left.outputTokens = above.outputTokens.left;
    owners.set('maxOutputTokens', above.outputTokens.owner);
  }
  if (above?.cost && (left.cost === undefined || !decimalAtLeast(above.cost.left, left.cost))) {
    left.cost = above.cost.left;
    owners.set('maxCost', above.cost.owner);
  }
  return { left, owners };
}

/** The pool an agentTool's call runs its child under (tool-call.ts sets it on the call's context). */
export const CHILD_BUDGET: unique symbol = Symbol('actorloop.childBudget');
export const childBudgetOf = (ctx: ToolContext): BudgetPool | undefined =>
  (ctx as ToolContext & { [CHILD_BUDGET]?: BudgetPool })[CHILD_BUDGET];
