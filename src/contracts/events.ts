import { z } from 'zod';
import { IdInput } from './ids.js';
import { recordOf } from './json.js';
import { FinishReason, Message, Usage } from './message.js';
import { ToolMode, ToolOutcome } from './tools.js';

/** The only schema version this build writes; see docs/event-log.md for migration rules. */
export const SCHEMA_VERSION = '1' as const;
export const KNOWN_SCHEMA_VERSIONS: readonly string[] = [SCHEMA_VERSION];

export const SurfaceOp = z.enum(['none', 'append', 'epoch']);
export type SurfaceOp = z.infer<typeof SurfaceOp>;

const id = IdInput;
const RequestDigest = z.string().regex(/^[0-9a-f]{64}$/);
const CallRef = z.object({ callId: id, name: z.string(), arguments: z.unknown() });

/**
 * A request asked by a child session on the session's behalf (docs/agents.md, "Requests from a
 * child"): the child session ids from this session's child down to the session that asked. Its
 * questionId and calls are that session's; `respond` routes the answer down along the path.
 */
const ChildPath = z.array(id).min(1).optional();

export const PendingRequest = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('approval'), questionId: id, calls: z.array(CallRef), expiresAt: z.number().optional(), path: ChildPath }),
  z.object({
    kind: z.literal('question'),
    questionId: id,
    callId: id,
    question: z.string(),
    schema: z.record(z.string(), z.unknown()).optional(),
    path: ChildPath,
  }),
]);
export type PendingRequest = z.infer<typeof PendingRequest>;

const ErrorInfo = z.looseObject({ name: z.string().optional(), message: z.string(), code: z.string().optional() });

/**
 * Payload schema of every event type, and the surface op each type is always written with.
 * Lifecycle payloads are loose objects: until the first release they may gain optional fields.
 */
export const EventPayloads = {
  'session/attached': z.looseObject({
    sessionInstanceId: id,
    writerEpoch: z.number().int().positive(),
    /** The agent the session runs (docs/agents.md); an older log's sessions run `default`. */
    agent: id.optional(),
    /** A child session's parent call (an agentTool's): the parent session, run and call, and the seq of its tool/call. */
    parent: z.object({ sessionId: id, runId: id, callId: id, seq: z.number().int().positive().optional() }).optional(),
  }),
  'input/accepted': z.looseObject({
    inputId: id,
    mode: z.enum(['steer', 'follow_up']),
    messages: z.array(Message).min(1),
  }),
  'input/cancelled': z.looseObject({ inputId: id }),
  'run/start': z.looseObject({
    runId: id,
    attemptId: id,
    runEpoch: z.number().int().positive(),
    kind: z.enum(['prompt', 'respond', 'continue', 'follow_up']),
    executionProfileFingerprint: z.string(),
    /** The follow-up input this run consumes. */
    inputId: id.optional(),
    /** The attempt's OpenTelemetry span (when tracing recorded it): a later attempt links to it. */
    trace: z.object({ traceId: z.string(), spanId: z.string() }).optional(),
    /** The run's output schema (docs/typed-output.md): its JSON Schema, digest and strictness. */
    output: z
      .object({ name: z.string(), jsonSchema: z.record(z.string(), z.unknown()), digest: RequestDigest, strict: z.boolean() })
      .optional(),
    /** The agent the attempt starts with (docs/agents.md); an older log's runs ran `default`. */
    agent: id.optional(),
    /** A child session's run: the parent call it answers (as in session/attached). */
    parent: z.object({ sessionId: id, runId: id, callId: id, seq: z.number().int().positive().optional() }).optional(),
    /** A respond to a request a child asked (its pendingRequest had a `path`): the answer, routed down by the agent call. */
    answered: z.object({ questionId: id, path: z.array(id).min(1), answer: z.unknown() }).optional(),
  }),
  'step/start': z.looseObject({}),
  'user/message': z.looseObject({ message: Message, inputId: id.optional() }),
  'assistant/attempt': z.looseObject({
    attemptNumber: z.number().int().positive(),
    requestDigest: RequestDigest,
    latencyMs: z.number().nonnegative(),
    error: ErrorInfo.extend({ retryable: z.boolean(), partialOutput: z.boolean() }),
  }),
  'assistant/message': z.looseObject({
    message: Message,
    usage: Usage.optional(),
    finishReason: FinishReason,
    latencyMs: z.number().nonnegative(),
    requestDigest: RequestDigest.optional(),
    /** The usage priced with the app's `pricing` when it was made (a decimal string). */
    cost: z.string().optional(),
    /** The worst case the call reserved against the run's budgets (docs/guarantees.md, "Budgets"). */
    reserved: z.object({ inputTokens: z.number(), outputTokens: z.number(), cost: z.string().optional() }).optional(),
  }),
  'tool/call': z.looseObject({
    callId: id,
    name: z.string(),
    arguments: z.unknown(),
    mode: ToolMode,
    resources: z.array(id),
    idempotencyKey: id,
  }),
  'tool/result': z.looseObject({
    callId: id,
    name: z.string(),
    outcome: ToolOutcome,
    startedAt: z.number().optional(),
    endedAt: z.number().optional(),
  }),
  'tool/batch-rejected': z.looseObject({
    issues: z.array(z.object({ callId: z.string(), name: z.string(), message: z.string() })).min(1),
  }),
  'approval/requested': z.looseObject({ pendingRequest: PendingRequest }),
  'approval/decided': z.looseObject({
    questionId: id,
    decisions: recordOf(z.enum(['approve', 'deny'])), // keyed by call ids: `__proto__` kept
    timedOut: z.boolean(),
  }),
  /** One call of a pending approval decided on its own (session.approve / session.deny): the run resumes once every call is. */
  'approval/call-decided': z.looseObject({ runId: id, questionId: id, callId: id, decision: z.enum(['approve', 'deny']) }),
  'question/asked': z.looseObject({ pendingRequest: PendingRequest }),
  'verification/rejected': z.looseObject({
    target: z.enum(['tool', 'final', 'output']),
    /** target `output`: the answer's JSON or schema issues (`path: message`), a protocol correction. */
    issues: z.array(z.string()).optional(),
    callId: z.string().optional(),
    reason: z.string(),
    message: Message,
  }),
  'steering/accepted': z.looseObject({ request: z.record(z.string(), z.unknown()), receipt: z.record(z.string(), z.unknown()) }),
  compaction: z.looseObject({
    summary: Message,
    replacedThroughSeq: z.number().int().nonnegative(),
    /** The summary call's usage (counted in the run's usage, cost and budgets). */
    usage: Usage.optional(),
    latencyMs: z.number().nonnegative().optional(),
  }),
  'checkpoint/loaded': z.looseObject({ messages: z.array(Message), stateContext: z.unknown().optional() }),
  'state/updated': z.looseObject({ stateContext: z.unknown() }),
  'cancellation/requested': z.looseObject({ reason: z.string(), runId: id.optional(), attemptId: id.optional() }),
  'final/message': z.looseObject({
    finalMessageId: id,
    runId: id,
    content: z.string(),
    /** The answer parsed and validated against the run's output schema (docs/typed-output.md). */
    output: z.unknown().optional(),
  }),
  'step/end': z.looseObject({ usage: Usage.optional() }),
  'run/suspended': z.looseObject({ pendingRequest: PendingRequest }),
  'run/end': z.looseObject({
    runId: id,
    attemptId: id,
    status: z.string(),
    outcome: z.string(),
    usage: Usage.optional(),
    error: ErrorInfo.optional(),
    result: z.record(z.string(), z.unknown()).optional(),
  }),
  'delivery/committed': z.looseObject({ finalMessageId: id }),
  'delivery/unknown': z.looseObject({ finalMessageId: id, reason: z.string() }),
  'resources/released': z.looseObject({ keys: z.array(id).min(1) }),
  /**
   * A transfer tool's call handed the session to agent `to` (docs/agents.md): committed with its
   * result; the session runs `to` from the next step on. `output`: the run's output schema from
   * now on, when `to` has one.
   */
  'agent/handoff': z.looseObject({
    from: id,
    to: id,
    callId: id,
    output: z
      .object({ name: z.string(), jsonSchema: z.record(z.string(), z.unknown()), digest: RequestDigest, strict: z.boolean() })
      .optional(),
  }),
} as const;

export type EventType = keyof typeof EventPayloads;
export const EVENT_TYPES = Object.keys(EventPayloads) as EventType[];
export const EventType = z.enum(EVENT_TYPES as [EventType, ...EventType[]]);
export type PayloadOf<T extends EventType> = z.infer<(typeof EventPayloads)[T]>;

/** Model-visible events append to the surface; compaction-like events start a new surface epoch. */
export const SURFACE_OPS: Record<EventType, SurfaceOp> = Object.fromEntries(EVENT_TYPES.map((t) => [t, 'none' as SurfaceOp])) as Record<
  EventType,
  SurfaceOp
>;
for (const t of ['user/message', 'assistant/message', 'tool/result', 'tool/batch-rejected', 'verification/rejected'] as const) {
  SURFACE_OPS[t] = 'append';
}
SURFACE_OPS.compaction = 'epoch';
SURFACE_OPS['checkpoint/loaded'] = 'epoch';

const nonNegInt = z.number().int().nonnegative();

/**
 * What a writer hands to `append`. A missing `eventId` gets a fresh one; a key it does not name is
 * refused (ValidationError), never dropped.
 */
export const EventDraft = z.strictObject({
  eventId: id.optional(),
  type: EventType,
  turn: nonNegInt,
  step: nonNegInt,
  attempt: nonNegInt,
  surfaceOp: SurfaceOp,
  payload: z.record(z.string(), z.unknown()),
});
export type EventDraft = z.input<typeof EventDraft>;

/**
 * One stored record (DESIGN §2): every backend stores exactly these fields. Its ids are read as
 * any non-empty string: a record logged before the id rule (IdInput, checked on every draft) may
 * hold a NUL or a lone surrogate an LMDB store kept.
 */
export const EventRecord = z.object({
  sessionId: z.string().min(1),
  seq: z.number().int().positive(),
  turn: nonNegInt,
  step: nonNegInt,
  attempt: nonNegInt,
  writerEpoch: z.number().int().positive(),
  eventId: z.string().min(1),
  type: EventType,
  surfaceOp: SurfaceOp,
  payload: z.record(z.string(), z.unknown()),
  occurredAt: z.string(),
  schemaVersion: z.literal(SCHEMA_VERSION),
});
export type EventRecord = z.infer<typeof EventRecord>;
/** DESIGN calls a stored record an `Event`. */
export type Event = EventRecord;

/** Narrowed view of a record of a known type. */
export type TypedEvent<T extends EventType> = Omit<EventRecord, 'type' | 'payload'> & { type: T; payload: PayloadOf<T> };

export function isEventOf<T extends EventType>(e: EventRecord, type: T): e is EventRecord & TypedEvent<T> {
  return e.type === type;
}
