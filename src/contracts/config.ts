import { z } from 'zod';

export const DEFAULT_COMPACTION_PROMPT =
  'Summarise the conversation so far for your own later use. Keep every fact, decision, open task, ' +
  'tool result and user preference that later turns may need; drop pleasantries and repetition. ' +
  'Write plain prose, at most a few hundred words.';

const posInt = z.number().int().positive();

/** Node.js runs a longer timer at once (after 1 ms, with a warning): longer waits are refused. */
export const MAX_TIMER_MS = 2_147_483_647;
const LONGEST_TIMER = `at most ${MAX_TIMER_MS} ms (about 24.8 days), the longest timer Node.js can set`;
/** A duration the runtime waits with a timer. */
export const timerMs = z.number().nonnegative().max(MAX_TIMER_MS, LONGEST_TIMER);

/**
 * The seed's LoopConfig, with DESIGN §6 defaults. Unknown keys are refused (as in every option
 * object): a misspelt option must not quietly become its default.
 */
export const LoopConfig = z
  .strictObject({
    contextWindow: posInt.default(128_000),
    outputReserve: z.number().int().nonnegative().default(4096),
    maxParallelTools: posInt.default(4),
    maxProtocolCorrections: z.number().int().nonnegative().default(2),
    maxProviderAttempts: posInt.default(3),
    retryBackoffMs: z.number().nonnegative().default(100),
    /** Upper bound of one retry wait, also for a provider's retry-after. */
    maxRetryDelayMs: timerMs.default(30_000),
    approvalTimeoutMs: z.number().nonnegative().default(3_600_000),
    compactionPrompt: z.string().min(1).default(DEFAULT_COMPACTION_PROMPT),
    /** How long a cancelled tool may ignore its signal before it is recorded uncertain-hanging. */
    cancelGraceMs: timerMs.default(2000),
  })
  .refine((c) => c.outputReserve < c.contextWindow, {
    path: ['outputReserve'],
    message: 'must be smaller than contextWindow (the context gets contextWindow − outputReserve tokens)',
  });
export type LoopConfig = z.output<typeof LoopConfig>;
export type LoopConfigInput = z.input<typeof LoopConfig>;

const DECIMAL = /^\d+(\.\d+)?$/;
/** A non-negative decimal string such as "0.25" (budgets and prices). */
export const isDecimal = (v: unknown): v is string => typeof v === 'string' && DECIMAL.test(v.trim());
export const Decimal = z.string().regex(DECIMAL, 'a non-negative decimal string such as "0.25"');

/** The seed's LoopBudget, checked after every step. */
export const LoopBudget = z.strictObject({
  maxSteps: posInt.default(20),
  maxToolCalls: posInt.optional(),
  maxOutputTokens: posInt.optional(),
  maxCost: Decimal.optional(),
  maxRecoveries: z.number().int().nonnegative().default(3),
  /** The run's wall-clock limit, waited with a timer (so at most MAX_TIMER_MS). */
  maxDurationMs: posInt.max(MAX_TIMER_MS, LONGEST_TIMER).optional(),
});
export type LoopBudget = z.output<typeof LoopBudget>;
export type LoopBudgetInput = z.input<typeof LoopBudget>;
