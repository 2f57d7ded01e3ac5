import type { StepPosition } from '../contracts/calls.js';
import { CapacityError } from '../contracts/errors.js';
import type { Message, Usage } from '../contracts/message.js';
import type { EventRecord } from '../contracts/events.js';
import { contextLimit, type SessionServices } from './session-services.js';
import { callWithRetries, type CountAttempt } from './call-model.js';
import { countedAt } from './call-budget.js';
import { contentDisplay } from '../contracts/content-text.js';
import { estimateTokens, sha256 } from '../persistence/surface.js';
import type { BudgetLeft } from '../contracts/reservation.js';

const line = (m: Message) =>
  `${m.role}${m.name ? ` (${m.name})` : ''}: ${contentDisplay(m.content)}` +
  `${m.toolCalls?.length ? ` [tool calls: ${m.toolCalls.map((c) => `${c.name}(${c.arguments})`).join(', ')}]` : ''}`;

/**
 * Summarises the part of the surface older than the current run with the model (using
 * `compactionPrompt`) and commits a `compaction` event (surfaceOp `epoch`), followed by copies of
 * the current run's surface events so that the new surface is [summary, ...current run].
 * Nothing older to summarise, or a summary request that would not fit the context itself →
 * CapacityError. The summary call is a model call like any other: the runtime's retries, each
 * failed attempt an `assistant/attempt`, its worst case reserved against the run's budgets first
 * (a BudgetRefusal when they cannot hold it), its response checked, its usage and reservation
 * recorded on the `compaction` event (and returned: the step counts it).
 */
export async function compact(
  env: SessionServices,
  at: StepPosition,
  runStartSeq: number,
  signal: AbortSignal,
  limits: SummaryLimits = {},
  count?: CountAttempt,
): Promise<Summarised> {
  const surface = env.surface;
  // the messages older than the run (seqs are in order); nothing older but the previous summary → nothing to do
  let olderCount = 0;
  while (olderCount < surface.seqs.length && surface.seqs[olderCount]! < runStartSeq) olderCount++;
  const limit = contextLimit(env);
  if (olderCount === 0 || (surface.epochType === 'compaction' && surface.seqs[olderCount - 1] === surface.epochSeq)) {
    throw new CapacityError(env.prefixTokens + surface.tokens, limit);
  }
  const replacedThroughSeq = surface.seqs[olderCount - 1]!;
  // the run's own surface events, read back from the log: the surface keeps messages only
  const kept: EventRecord[] = await env.writer.committedSurface(Math.max(runStartSeq, surface.epochSeq));
  const system: Message = { role: 'system', content: env.config.compactionPrompt };
  // the summary request must itself fit: overly long messages are cut in the middle (marked)
  const lines = surface.messages.slice(0, olderCount).map(line);
  const transcript = fitLines(lines, (limit - estimateTokens(system)) * 4 - 8);
  if (transcript === undefined)
    throw new CapacityError(estimateTokens(system) + Math.ceil(lines.reduce((n, l) => n + l.length + 1, 0) / 4), limit);
  const request: Message[] = [system, { role: 'user', content: transcript }];
  // reserved against the run's budgets (and a sub-agent's pools) as any model call, its output
  // capped by what they leave; a wait for a rate limit ends at the run's maxDurationMs
  const { res, latencyMs, reserved, cost, pricingError } = await callWithRetries(env, at, signal, {
    messages: request,
    tools: [],
    digest: sha256(JSON.stringify(request)),
    inputTokens: estimateTokens(request[0]!) + estimateTokens(request[1]!),
    live: false,
    budget: { ...(limits.budgetLeft ? { left: limits.budgetLeft } : {}) },
    ...(limits.deadlineAt !== undefined ? { deadlineAt: limits.deadlineAt } : {}),
    ...(count ? { count } : {}),
  });
  const summary: Message = { role: 'user', content: `Summary of the conversation so far:\n${res.message.content}` };
  // a summary whose usage never came back counts at its reservation, never at zero (as the step's call)
  const unreported = reserved !== undefined && !res.usage;
  env.writer.stage('compaction', at, {
    summary,
    replacedThroughSeq,
    ...(res.usage ? { usage: res.usage } : {}),
    latencyMs,
    ...(reserved ? { reserved } : {}),
    ...(unreported ? { counted: 'reservation' } : {}),
  });
  if (unreported) count?.(countedAt(reserved));
  // copies, marked: folds (locks, budgets) must not count them a second time
  for (const e of kept)
    env.writer.stage(e.type as 'user/message', { turn: e.turn, step: e.step, attempt: e.attempt }, {
      ...e.payload,
      copiedFrom: e.payload.copiedFrom ?? e.seq,
    } as never);
  await env.writer.commit();
  return {
    ...(res.usage ? { usage: res.usage } : {}),
    ...(cost !== undefined ? { cost } : {}),
    ...(pricingError !== undefined ? { pricingError } : {}),
  };
}

/** What bounds a summary call: the run's usage budgets' remaining (absent: none) and its maxDurationMs deadline. */
export interface SummaryLimits {
  budgetLeft?: BudgetLeft;
  deadlineAt?: number;
}

/** A summary call's spending: its usage priced (or the app's pricing error); its failed attempts are counted as they fail (`count`). */
export interface Summarised {
  usage?: Usage;
  cost?: string;
  pricingError?: unknown;
}

/** The shortest a line is cut to (what remains of each overly long message, marker included). */
const MIN_LINE = 120;
const MARKER_ROOM = 40;

/**
 * The lines joined by newlines in at most `maxChars`: unchanged if they fit, else every line longer
 * than the largest cap that fits is cut to it — its head and tail kept around a marker saying how
 * much was cut. Undefined when even MIN_LINE characters a line do not fit (too many messages).
 */
export function fitLines(lines: readonly string[], maxChars: number): string | undefined {
  const size = (cap: number) => lines.reduce((n, l) => n + Math.min(l.length, cap) + 1, 0);
  if (size(Infinity) <= maxChars + 1) return lines.join('\n');
  if (size(MIN_LINE) > maxChars + 1) return undefined;
  let lo = MIN_LINE;
  let hi = Math.max(...lines.map((l) => l.length));
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (size(mid) <= maxChars + 1) lo = mid;
    else hi = mid - 1;
  }
  return lines.map((l) => (l.length <= lo ? l : cutMiddle(l, lo))).join('\n');
}

function cutMiddle(l: string, cap: number): string {
  const keep = cap - MARKER_ROOM;
  const head = Math.ceil(keep / 2);
  return `${l.slice(0, head)} [… ${l.length - keep} characters cut …] ${l.slice(l.length - (keep - head))}`;
}
