import type { AnyTool } from '../tools/define-tool.js';
import type { ToolCallIntent } from '../contracts/calls.js';
import type { ExecutionResult, RecoveryOutcome } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { SessionHead } from '../persistence/head.js';
import { awaitedRequest, foldRunEvents, type OpenRunState } from '../persistence/open-run.js';
import { collectEvents } from '../persistence/open-run-read.js';
import type { Usage } from '../contracts/message.js';
import { isDecimal } from '../contracts/config.js';
import { addDecimal, subDecimal } from '../contracts/budget.js';
import { tightest, type PoolLeft } from '../actors/budget-pool.js';
import { addCounted, budgetLeft, noneCounted, reserve, type Counted, type Reservation } from '../contracts/reservation.js';
import type { LoopBudget } from '../contracts/config.js';
import { priceOf } from '../actors/pricing.js';
import type { SessionServices } from '../actors/session-services.js';
import { stageRunEnd } from '../actors/end-run.js';
import { withParsedArguments } from '../tools/logged-call.js';

/**
 * What the open run's attempts spent (DESIGN §4 item 8: budgets and results are per run), cost
 * re-priced with today's `pricing` (a price that throws or is not a decimal counts nothing).
 */
export function spentOf(
  env: SessionServices,
  open: OpenRunState,
): { toolCalls: number; usage: Usage; cost: string; counted: Counted; recoveries: number; corrections: number } {
  const { toolCalls, usage, modelUsages, reservations, callCosts, recoveries, corrections } = open.spent;
  let cost = '0';
  for (const u of modelUsages) cost = addDecimal(cost, priceOr0(env, u));
  for (const c of callCosts) cost = addDecimal(cost, c); // a child run's, as its result recorded it
  let counted = noneCounted();
  for (const r of reservations) counted = addCounted(counted, { outputTokens: r.outputTokens, cost: r.cost ?? priceOr0(env, r) });
  return { toolCalls, usage, cost, counted, recoveries, corrections };
}

/** `pricing` of `u`; nothing when there is no pricing or it throws or answers no decimal. */
function priceOr0(env: Pick<SessionServices, 'pricing' | 'model'>, u: Usage): string {
  if (!env.pricing) return '0';
  let c: unknown;
  try {
    c = env.pricing(u, env.model.modelId);
  } catch {
    return '0';
  }
  return isDecimal(c) ? c : '0';
}

/**
 * The reservation a recovering attempt counts for the crashed attempt's possibly-sent model call
 * (docs/guarantees.md, "Budgets"): the worst case the run would reserve for a call over the context
 * the log holds, from what the budgets leave after `spent`; all that is left when even the smallest
 * call would not fit (the crashed call's reservation was no more than that). Undefined without a usage budget.
 */
export function recoveredReservation(
  env: Pick<SessionServices, 'pricing' | 'model' | 'config' | 'prefixTokens' | 'surface'>,
  budget: LoopBudget,
  spent: { usage: Usage; cost: string; counted: Counted },
  /** A sub-agent's: what its ancestors' pools leave before its recorded spending is counted there. */
  above?: PoolLeft,
): Reservation | undefined {
  const own = budget.maxCost !== undefined || budget.maxOutputTokens !== undefined;
  if (!own && !above?.cost && !above?.outputTokens) return undefined;
  const used = { outputTokens: spent.usage.outputTokens + spent.counted.outputTokens, cost: addDecimal(spent.cost, spent.counted.cost) };
  const { left } = tightest(own ? budgetLeft(budget, used) : undefined, above && lessUsed(above, used));
  const inputTokens = env.prefixTokens + env.surface.tokens;
  let r;
  try {
    r = reserve(left, inputTokens, env.model.maxOutputTokens ?? env.config.outputReserve, env.pricing ? (u) => priceOf(env, u) : undefined);
  } catch {
    return { inputTokens, outputTokens: left.outputTokens ?? 0, ...(left.cost !== undefined ? { cost: left.cost } : {}) };
  }
  if (r.ok) return r.reservation;
  return { inputTokens, outputTokens: left.outputTokens ?? 0, ...(left.cost !== undefined ? { cost: left.cost } : {}) };
}

/** What `above` leaves once `used` is counted there too. */
function lessUsed(above: PoolLeft, used: Counted): PoolLeft {
  return {
    ...(above.outputTokens
      ? { outputTokens: { ...above.outputTokens, left: Math.max(0, above.outputTokens.left - used.outputTokens) } }
      : {}),
    ...(above.cost ? { cost: { ...above.cost, left: subDecimal(above.cost.left, used.cost) } } : {}),
  };
}

/**
 * DESIGN §5, finals: a `final/message` without a delivery event is redelivered when the owner is
 * idempotent (it gets the same finalMessageId), else recorded `delivery/unknown`; either way the
 * run is settled with its `run/end`. Returns the open run left to resume (undefined if settled).
 */
export async function settleInterruptedFinal(env: SessionServices, open: OpenRunState): Promise<OpenRunState | undefined> {
  const final = open.undeliveredFinals.at(-1);
  if (!final) return open;
  const at = { turn: open.turn, step: final.step, attempt: open.runEpoch };
  const spent = spentOf(env, open);
  let status: 'succeeded' | 'delivery_unknown' = 'delivery_unknown';
  let reason = 'the process stopped after the final answer was committed and before its delivery was recorded';
  // a writer that no longer holds the session (fenced, its lease lost while opening) delivers
  // nothing: the final is left to the session's next writer
  if (!env.writer.mayStartEffect()) return open;
  if (env.delivery?.idempotent) {
    try {
      await env.delivery.deliver({
        finalMessageId: final.finalMessageId,
        sessionId: env.sessionId,
        runId: open.runId,
        turn: open.turn,
        step: final.step,
        content: final.content,
        ...(final.output !== undefined ? { output: final.output } : {}),
      });
      status = 'succeeded';
    } catch (e) {
      reason = `redelivery after recovery failed: ${(e as Error)?.message ?? e}`;
    }
  } else if (!env.delivery) {
    status = 'succeeded'; // the result itself was the delivery, and it is in the log
  }
  if (status === 'succeeded') {
    env.writer.stage('delivery/committed', at, {
      finalMessageId: final.finalMessageId,
      ...(env.delivery ? { redelivered: true } : { owner: 'result' }),
    });
    open.deliveredFinalIds.push(final.finalMessageId);
  } else {
    env.writer.stage('delivery/unknown', at, { finalMessageId: final.finalMessageId, reason });
    open.deliveryUnknownFinalIds.push(final.finalMessageId);
  }
  const result: ExecutionResult = {
    runId: open.runId,
    attemptId: open.attemptId,
    outcome: status === 'succeeded' ? 'completed' : 'failed',
    status,
    finalMessage: final.content,
    finalMessageId: final.finalMessageId,
    ...(final.output !== undefined ? { output: final.output } : {}),
    ...(status === 'delivery_unknown' ? { error: { kind: 'finalization' as const, message: reason } } : {}),
    checkpointCommitted: true,
    historyConsistent: true,
    deliveryErrors: [],
    // the run's own figures, as any settled result carries them
    usage: spent.usage,
    steps: final.step,
    toolCalls: spent.toolCalls,
    recoveries: spent.recoveries,
    ...(env.pricing ? { cost: spent.cost } : {}),
    ...(spent.counted.outputTokens > 0 || spent.counted.cost !== '0' ? { counted: spent.counted } : {}),
    uncertainCalls: open.uncertainCalls,
  };
  stageRunEnd(env.writer, at, result);
  await env.writer.commit();
  return undefined;
}

/** What the recovery outcome reads of a session's services (a read-only preview has no writer). */
export type RecoveryReader = Pick<SessionServices, 'sessionId' | 'heldLocks'> & {
  /** The tools a continue would be offered. */
  tools: ReadonlyMap<string, AnyTool>;
  writer: { readonly writerEpoch: number };
  /**
   * An agent call (a resumable `tool/call`) whose tool is not in `tools` is taken as one the
   * opening runtime defines: a preview by a reader that does not know the app's agents (the CLI).
   */
  agentsDefined?: boolean;
};

type Resolution = 'rerun' | 'skipped' | 'reconcile' | 'uncertain-hanging';

/**
 * What `continue` will do with each interrupted call, decided as recoverCalls (run-lifecycle.ts)
 * decides it: a parallel call runs again unless its arguments no longer fit its tool or a
 * resource it names is locked (held, or locked by an earlier call of the batch that becomes
 * uncertain-hanging); an exclusive call (or one whose tool is gone) goes to reconcile, else is
 * uncertain-hanging. A reconcile is assumed to settle its call (it cannot be known before). Under
 * a standing cancel no parallel call runs again (skipped); an agent call stays `rerun`, which the
 * report leaves out as ever (not uncertain: the cancelled run cancels its child and answers it so).
 */
function resolutions(
  env: RecoveryReader,
  calls: readonly ToolCallIntent[],
  released: ReadonlyMap<string, readonly string[]>,
  cancelled: boolean,
): Resolution[] {
  const locked = new Set(env.heldLocks);
  return calls.map((c) => {
    const tool = env.tools.get(c.name);
    if (c.resumable && !tool && env.agentsDefined) return c.resources.some((r) => locked.has(r)) ? 'skipped' : 'rerun';
    if ((c.mode === 'parallel' || c.resumable) && tool) {
      if (withParsedArguments(env.tools, c).mismatch !== undefined || c.resources.some((r) => locked.has(r))) return 'skipped';
      return cancelled && !c.resumable ? 'skipped' : 'rerun';
    }
    if (tool?.reconcile) return 'reconcile';
    for (const r of c.resources) if (!released.get(c.callId)?.includes(r)) locked.add(r);
    return 'uncertain-hanging';
  });
}

/** DESIGN §5's RecoveryOutcome, from the head, the open run and the last settled run. */
export async function recoveryOutcome(
  store: EventStore,
  env: RecoveryReader,
  head: SessionHead | undefined,
  open: OpenRunState | undefined,
  settledFinals: { delivered: string[]; unknown: string[] },
): Promise<RecoveryOutcome> {
  let last = { delivered: [] as string[], unknown: [] as string[] };
  if (head?.lastSettledRun?.endSeq) {
    const f = foldRunEvents(await collectEvents(store, env.sessionId, head.lastSettledRun.startSeq, head.lastSettledRun.endSeq));
    if (f) last = { delivered: f.deliveredFinalIds, unknown: f.deliveryUnknownFinalIds };
  }
  const uniq = (xs: string[]) => [...new Set(xs)];
  const unresolved = open?.unresolvedCalls ?? [];
  const released = open?.releasedAfterIntent ?? new Map<string, string[]>();
  const resolved = resolutions(env, unresolved, released, open?.cancelRequested !== undefined);
  const asked = open ? awaitedRequest(open) : undefined;
  return {
    sessionId: env.sessionId,
    writerEpoch: env.writer.writerEpoch,
    interruptedRuns: open
      ? [
          {
            runId: open.runId,
            turn: open.turn,
            runEpoch: open.runEpoch,
            attemptId: open.attemptId,
            ...(open.lastEndStatus ? { lastStatus: open.lastEndStatus } : {}),
            ...(asked ? { pendingRequest: asked } : {}),
            stopAccepted: open.stopAccepted,
            ...(open.cancelRequested ? { cancelRequested: open.cancelRequested } : {}),
          },
        ]
      : [],
    deliveredFinalIds: uniq([...settledFinals.delivered, ...last.delivered, ...(open?.deliveredFinalIds ?? [])]),
    deliveryUnknownFinalIds: uniq([...settledFinals.unknown, ...last.unknown, ...(open?.deliveryUnknownFinalIds ?? [])]),
    // locked now, and what the interrupted exclusive calls without reconcile will lock when the
    // run continues (they become uncertain-hanging then; reconcile may still settle the others)
    activeResourceLocks: uniq([
      ...env.heldLocks,
      ...unresolved
        .filter((_, i) => resolved[i] === 'uncertain-hanging')
        .flatMap((c) => c.resources.filter((r) => !released.get(c.callId)?.includes(r))),
    ]),
    // (an agentTool's call that runs again resumes its child session: not uncertain)
    uncertainToolCalls: unresolved.flatMap((c, i) =>
      c.resumable && resolved[i] === 'rerun'
        ? []
        : [
            {
              runId: open!.runId,
              callId: c.callId,
              name: c.name,
              mode: c.mode,
              idempotencyKey: c.idempotencyKey,
              resolution: resolved[i]!,
            },
          ],
    ),
  };
}
