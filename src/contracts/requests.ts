import { z } from 'zod';
import { IdInput } from './ids.js';
import { JsonValue } from './json.js';
import { UserMessage, Usage, zeroUsage } from './message.js';
import { PendingRequest } from './events.js';
import { Spending } from './spending.js';
import { ToolMode, type ToolOutcome } from './tools.js';

const id = IdInput;
/** Checked as JSON at run time; typed `unknown` (an answer's shape is the question's). */
const AnyJson: z.ZodType<unknown> = JsonValue;

/** A prompt's message: a string (one user message), one user message, or several. */
export const PromptMessage = z.union([z.string(), UserMessage, z.array(UserMessage).min(1)]);
export type PromptMessage = z.infer<typeof PromptMessage>;

/** The run's output schema (docs/typed-output.md): a zod schema, kept by reference. */
const OutputSchema = z.custom<z.ZodType>((v) => v instanceof z.ZodType, 'a zod schema (e.g. z.object({ … }))').optional();
const Respond = z.strictObject({
  kind: z.literal('respond'),
  runId: id.optional(),
  attemptId: id.optional(),
  questionId: id,
  answer: AnyJson,
  output: OutputSchema,
});
const Continue = z.strictObject({ kind: z.literal('continue'), runId: id.optional(), attemptId: id.optional(), output: OutputSchema });

/**
 * `session.execute` input (DESIGN §6). A prompt names its run and attempt; a respond or continue
 * may leave them out: the open run's id is taken and a new attempt id generated.
 */
export const ExecutionRequest = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('prompt'), runId: id, attemptId: id, message: PromptMessage, output: OutputSchema }),
  Respond,
  Continue,
]);
export type ExecutionRequest = z.infer<typeof ExecutionRequest>;
/** An execute request with both its ids, given or generated. */
export type IdentifiedRequest = ExecutionRequest & { runId: string; attemptId: string };

/**
 * `session.run` input: a message (string, user message or several) to prompt with, or an execute
 * request whose `runId` / `attemptId` may be left out (then generated, or the open run's).
 */
export const RunRequest = z.union([
  PromptMessage,
  z.discriminatedUnion('kind', [
    z.strictObject({ kind: z.literal('prompt'), runId: id.optional(), attemptId: id.optional(), message: PromptMessage }),
    Respond,
    Continue,
  ]),
]);
export type RunRequest = z.input<typeof RunRequest>;
/** A RunRequest as checked (defaults applied). */
export type CheckedRunRequest = z.output<typeof RunRequest>;

export const RunStatus = z.enum([
  'succeeded',
  'suspended',
  'cancelled',
  'stopped',
  'budget_exhausted',
  'blocked',
  'detached',
  'fenced',
  'failed',
  'delivery_unknown',
]);
export type RunStatus = z.infer<typeof RunStatus>;

/** Ends that leave a run open: a later attempt goes on with it (or it waits for an answer); calls it left unsettled stay so. */
export const STILL_OPEN: ReadonlySet<RunStatus> = new Set<RunStatus>(['suspended', 'detached', 'fenced']);

export const Outcome = z.enum(['completed', 'suspended', 'cancelled', 'failed', 'incomplete']);
export type Outcome = z.infer<typeof Outcome>;

/**
 * A failed delivery to a subscriber, as a result lists it: the consumer, the envelope (`seq`, and
 * the attempt it was of: `runId`, `attemptId` — another attempt's when it failed after that
 * attempt's result was made), why, and the listener's error message.
 */
export const DeliveryErrorInfo = z.object({
  consumer: z.string(),
  seq: z.number().int(),
  reason: z.enum(['closed', 'error', 'timeout']),
  message: z.string().optional(),
  runId: z.string().optional(),
  attemptId: z.string().optional(),
});
export type DeliveryErrorInfo = z.infer<typeof DeliveryErrorInfo>;

/**
 * How a call whose outcome was uncertain after a crash (its intent logged, its result not) was
 * resolved by a later attempt of its run: an exclusive call `reconciled` (its reconcile hook told),
 * or recorded `uncertain-hanging` / `uncertain-settled`; a parallel call `re-run`, or `skipped`
 * (a resource it names stayed locked, or its arguments no longer fit the tool).
 */
export const UncertainResolution = z.enum(['reconciled', 'uncertain-hanging', 'uncertain-settled', 're-run', 'skipped']);
export type UncertainResolution = z.infer<typeof UncertainResolution>;

/** One call of a run whose outcome was uncertain after a crash, and how it was resolved. */
export const UncertainCall = z.object({ name: z.string(), callId: z.string(), mode: ToolMode, resolution: UncertainResolution });
export type UncertainCall = z.infer<typeof UncertainCall>;

/** The resolution a recovered call's recorded outcome stands for. */
export function resolutionOf(mode: ToolMode, outcome: Pick<ToolOutcome, 'kind'>): UncertainResolution {
  if (outcome.kind === 'skipped') return 'skipped';
  if (mode === 'parallel') return 're-run';
  if (outcome.kind === 'uncertain-hanging' || outcome.kind === 'uncertain-settled') return outcome.kind;
  return 'reconciled';
}

/**
 * What settling a session's interrupted run found, before a new run started on it (resume by
 * default, docs/recovery.md): the interrupted run, how its continue ended, the calls whose outcome
 * was uncertain and how they were resolved, and what became of finals left undelivered.
 */
export const Recovered = z.object({
  runId: z.string(),
  /** The continue attempt that settled it. */
  attemptId: z.string(),
  outcome: Outcome,
  status: RunStatus,
  uncertainCalls: z.array(UncertainCall),
  /** Redelivery: finals of the run delivered by the continue, and those whose delivery stays unknown. */
  deliveredFinalIds: z.array(z.string()),
  deliveryUnknownFinalIds: z.array(z.string()),
});
export type Recovered = z.infer<typeof Recovered>;

/** What `execute` resolves with: every run failure is a result, not a rejection. */
export const ExecutionResult = z.object({
  runId: z.string(),
  attemptId: z.string(),
  outcome: Outcome,
  status: RunStatus,
  finalMessage: z.string().optional(),
  finalMessageId: z.string().optional(),
  /** The final answer parsed and validated against the run's `output` schema (docs/typed-output.md). */
  output: z.unknown().optional(),
  pendingRequest: PendingRequest.optional(),
  error: z
    .object({
      kind: z.enum(['cancelled', 'execution', 'finalization', 'inconsistent']),
      message: z.string(),
      /**
       * The typed error (e.g. ProviderError) live; read back from the log, its recorded name,
       * message, code and JSON fields (the `is*Error` guards recognise both).
       */
      cause: z.unknown().optional(),
    })
    .optional(),
  /** The budget that ran out (status budget_exhausted). */
  budget: z.string().optional(),
  /**
   * The session whose budget that is, when it is not this run's own: a sub-agent's ancestor, whose
   * remaining could not hold the sub-agent's next call (docs/agents.md, "Budgets").
   */
  budgetOwner: z.string().optional(),
  /** The held resource locks that blocked the run (status blocked). */
  blockedBy: z.array(z.string()).optional(),
  checkpointCommitted: z.boolean(),
  historyConsistent: z.boolean(),
  deliveryErrors: z.array(DeliveryErrorInfo),
  usage: Usage,
  steps: z.number().int().nonnegative(),
  /** The run's tool calls, cost (decimal string, with `pricing`) and recoveries so far (all attempts). */
  toolCalls: z.number().int().nonnegative().optional(),
  cost: z.string().optional(),
  /**
   * Spent, reserved and remaining per usage budget (maxCost, maxOutputTokens), and the calls whose
   * reported usage went above their reservation (docs/guarantees.md, "Budgets").
   */
  spending: Spending.optional(),
  /**
   * What the run counts at reservation (calls whose usage never came back: failed attempts, a
   * crashed attempt's call), beside its reported `usage` and `cost`; absent when nothing.
   */
  counted: z.object({ outputTokens: z.number().int().nonnegative(), cost: z.string() }).optional(),
  recoveries: z.number().int().nonnegative().optional(),
  /**
   * Every call of the run (all its attempts, whichever process resolved it) whose outcome was
   * uncertain after a crash, with how it was resolved (read from the log).
   */
  uncertainCalls: z.array(UncertainCall).default([]),
  /** A new run that first settled the session's interrupted run: what that recovery found. */
  recovered: Recovered.optional(),
});
export type ExecutionResult = z.infer<typeof ExecutionResult>;

/** A result read back from a run/end record (one written before `uncertainCalls` gets `[]`). */
export function storedResult(result: unknown): ExecutionResult {
  const r = result as Omit<ExecutionResult, 'uncertainCalls'> & { uncertainCalls?: ExecutionResult['uncertainCalls'] };
  return { ...r, uncertainCalls: r.uncertainCalls ?? [] };
}

/**
 * The result for an attempt that did not run at all: the session was fenced, the kill switch is
 * set, an earlier attempt was interrupted (`detached`), or the run actor itself crashed (`failed`).
 */
export function notRunResult(
  ids: { runId: string; attemptId: string },
  status: 'cancelled' | 'detached' | 'fenced' | 'failed',
  message: string,
): ExecutionResult {
  return {
    runId: ids.runId,
    attemptId: ids.attemptId,
    outcome: status === 'cancelled' ? 'cancelled' : status === 'failed' ? 'failed' : 'incomplete',
    status,
    error: { kind: status === 'cancelled' ? 'cancelled' : status === 'failed' ? 'execution' : 'inconsistent', message },
    checkpointCommitted: false,
    uncertainCalls: [],
    historyConsistent: status !== 'failed',
    deliveryErrors: [],
    usage: zeroUsage(),
    steps: 0,
  };
}

/** `session.releaseResources` input: the resource keys to release. */
export const ResourceKeys = z.array(IdInput).min(1);

/** `session.submitInput` input. */
export const InputEnvelope = z.strictObject({
  inputId: id,
  message: PromptMessage,
  mode: z.enum(['steer', 'follow_up']),
});
export type InputEnvelope = z.infer<typeof InputEnvelope>;

export const InputReceipt = z.object({
  inputId: z.string(),
  status: z.enum(['accepted', 'consumed', 'cancelled']),
  durability: z.enum(['durable']),
});
export type InputReceipt = z.infer<typeof InputReceipt>;

/** `session.stopAfterCurrentToolRound` input (DESIGN §4 item 10). */
export const StopRequest = z.strictObject({
  sessionId: id,
  sessionInstanceId: id,
  interactionId: id,
  expectedRunEpoch: z.number().int().positive(),
  idempotencyKey: id,
});
export type StopRequest = z.infer<typeof StopRequest>;

export const StopReceipt = z.object({
  schemaVersion: z.literal(1),
  request: StopRequest,
  executionProfileFingerprint: z.string().regex(/^[0-9a-f]{64}$/),
});
export type StopReceipt = z.infer<typeof StopReceipt>;

/** Converts a prompt message into the user messages it stands for. */
export function toMessages(m: PromptMessage): z.output<typeof UserMessage>[] {
  if (typeof m === 'string') return [{ role: 'user', content: m }];
  return Array.isArray(m) ? m : [m];
}

/** What opening a session found in its log (DESIGN §5). */
export const RecoveryOutcome = z.object({
  sessionId: z.string(),
  writerEpoch: z.number().int().positive(),
  /** Runs started and not settled: resumable with `continue` (or `respond` when suspended). */
  interruptedRuns: z.array(
    z.object({
      runId: z.string(),
      turn: z.number().int(),
      runEpoch: z.number().int(),
      attemptId: z.string(),
      /** run/end status of the newest attempt when it wrote one (suspended, detached, fenced). */
      lastStatus: RunStatus.optional(),
      /** The approval or question the run waits for (a suspended run: respond to it); none once its cancel stands. */
      pendingRequest: PendingRequest.optional(),
      stopAccepted: z.boolean(),
      /** A cancel its attempt recorded before it stopped: it stands — `continue` ends the run `cancelled`, starting no call again. */
      cancelRequested: z.object({ reason: z.string() }).optional(),
    }),
  ),
  /** Final ids of the open and the last settled run whose delivery is committed. */
  deliveredFinalIds: z.array(z.string()),
  /** Final ids whose delivery outcome is unknown (delivery/unknown written, or interrupted). */
  deliveryUnknownFinalIds: z.array(z.string()),
  /** Resource keys locked by uncertain calls, until released. */
  activeResourceLocks: z.array(z.string()),
  /** Tool calls whose intent is logged without a result, and what recovery does about them. */
  uncertainToolCalls: z.array(
    z.object({
      runId: z.string(),
      callId: z.string(),
      name: z.string(),
      mode: z.enum(['parallel', 'exclusive']),
      idempotencyKey: z.string(),
      /**
       * What `continue` does with it: run it again (parallel), skip it (parallel, its arguments no longer fit, a
       * resource it names stays locked, or the run's cancel stands), ask reconcile, or record it uncertain-hanging.
       */
      resolution: z.enum(['rerun', 'skipped', 'reconcile', 'uncertain-hanging']),
    }),
  ),
});
export type RecoveryOutcome = z.infer<typeof RecoveryOutcome>;
