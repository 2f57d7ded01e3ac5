/**
 * The crash torture's budget check (docs/guarantees.md, "Budgets"): the torture's model bills
 * every call it answers in an fsync'd usage ledger before it returns; after a trial, per run, the
 * ledger's priced usage (what the provider billed, crashed calls included) and the log's own
 * count (priced usage, plus failed attempts and crashed attempts' calls at their reservations)
 * never cross `maxCost`, and the log never counts less than was billed.
 */
import type { EventRecord } from '../../src/contracts/events.js';
import { addDecimal, decimalAtLeast } from '../../src/contracts/budget.js';
import type { Usage } from '../../src/contracts/message.js';
import { tokenPrice } from './budget-pricing.js';

/** The torture runs' cost budget: a few crashed calls' reservations fit, many do not. */
export const TORTURE_MAX_COST = '0.6';
/** The torture model's output limit (`ModelProvider.maxOutputTokens`): a call reserves at most 20 output tokens. */
export const TORTURE_MAX_OUTPUT = 20;
/** What the torture model reports (and bills) for a call sent with output cap `cap`. */
export const tortureUsage = (cap: number | undefined): Usage => ({
  inputTokens: 5,
  outputTokens: Math.min(TORTURE_MAX_OUTPUT, cap ?? TORTURE_MAX_OUTPUT),
});

export const usageLine = (sessionId: string, runId: string, u: Usage, pid: number) =>
  `${sessionId}\t${runId}\t${u.inputTokens}\t${u.outputTokens}\t${pid}`;

/** Per `${session}\0${run}`: the priced sum of the usage ledger's lines. */
export function billedOf(text: string, v: (msg: string) => void): Map<string, string> {
  const billed = new Map<string, string>();
  for (const line of text.split('\n').filter(Boolean)) {
    const [s, run, i, o] = line.split('\t');
    if (!s || !run || !/^\d+$/.test(i ?? '') || !/^\d+$/.test(o ?? '')) {
      v(`malformed usage ledger line ${JSON.stringify(line)}`);
      continue;
    }
    const k = `${s}\u0000${run}`;
    billed.set(k, addDecimal(billed.get(k) ?? '0', tokenPrice({ inputTokens: Number(i), outputTokens: Number(o) })));
  }
  return billed;
}

type Reserved = { inputTokens: number; outputTokens: number; cost?: string };

/** What the log counts against the run's budget: priced usage, and reservations counted for calls whose usage never came back. */
export function loggedCostOf(events: readonly EventRecord[], runId: string): string {
  let cost = '0';
  let inRun = false;
  for (const e of events) {
    const p = e.payload as Record<string, unknown>;
    if (e.type === 'run/start') inRun = p.runId === runId;
    if (!inRun || p.copiedFrom !== undefined) continue;
    if (e.type === 'run/start' && p.recoveredReservation) {
      const r = p.recoveredReservation as Reserved;
      cost = addDecimal(cost, r.cost ?? tokenPrice(r));
    }
    if (e.type === 'assistant/attempt' && p.counted === 'reservation') {
      const r = p.reserved as Reserved;
      cost = addDecimal(cost, r.cost ?? tokenPrice(r));
    }
    if ((e.type === 'assistant/message' || e.type === 'compaction') && p.usage) cost = addDecimal(cost, tokenPrice(p.usage as Usage));
  }
  return cost;
}

/** The violations of one session's runs: the billed and the logged cost each within maxCost, the logged no less than the billed. */
export function checkSpending(
  sessionId: string,
  runIds: readonly string[],
  events: readonly EventRecord[],
  billed: Map<string, string>,
  v: (msg: string) => void,
): void {
  for (const runId of runIds) {
    const bill = billed.get(`${sessionId}\u0000${runId}`) ?? '0';
    const logged = loggedCostOf(events, runId);
    if (!decimalAtLeast(TORTURE_MAX_COST, bill))
      v(`${sessionId}/${runId}: the provider billed ${bill}, crossing maxCost ${TORTURE_MAX_COST}`);
    if (!decimalAtLeast(TORTURE_MAX_COST, logged))
      v(`${sessionId}/${runId}: the log counts ${logged}, crossing maxCost ${TORTURE_MAX_COST}`);
    if (!decimalAtLeast(logged, bill)) v(`${sessionId}/${runId}: the log counts ${logged}, less than the ${bill} billed`);
  }
}
