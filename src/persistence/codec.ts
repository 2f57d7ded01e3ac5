import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { CorruptLogError, InvariantViolation, UnknownSchemaVersionError, ValidationError } from '../contracts/errors.js';
import {
  EventDraft,
  EventPayloads,
  EventRecord,
  KNOWN_SCHEMA_VERSIONS,
  SCHEMA_VERSION,
  SURFACE_OPS,
  type EventType,
} from '../contracts/events.js';
import { parseInput, unreadable } from '../contracts/validate.js';
import { assertJson } from '../contracts/json.js';
import { isId, isIdRuleIssue } from '../contracts/ids.js';

/** A draft after validation: payload parsed by its schema and made plain JSON. */
export interface PreparedDraft {
  eventId: string;
  /** Whether the caller chose the id (only then can it already be stored). */
  callerId: boolean;
  type: EventType;
  turn: number;
  step: number;
  attempt: number;
  surfaceOp: EventRecord['surfaceOp'];
  payload: Record<string, unknown>;
  /** The payload as JSON text: encoded once, reused for the stored record. */
  payloadJson: string;
}

// safe integers only, the same rule as the record and head schemas (zod's .int()): a turn of 1e20
// would be stored and then fail to read back
const isNonNegInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * LMDB keys are at most 1,978 bytes; the id index's key is [sessionId, eventId]. Both stores
 * refuse a pair longer than this (so that they agree), with a ValidationError.
 */
export const MAX_ID_KEY_BYTES = 1900;

/** A ValidationError (at `path` of `where`'s input) unless `[sessionId, eventId]` fits the id index. */
export function assertEventIdFits(sessionId: string, eventId: string, where: string, path: (string | number)[]): void {
  if (sessionId.length + eventId.length <= MAX_ID_KEY_BYTES / 3) return; // fits whatever the characters
  const bytes = Buffer.byteLength(sessionId) + Buffer.byteLength(eventId);
  if (bytes > MAX_ID_KEY_BYTES) {
    throw new ValidationError(where, [
      { path: path, message: `eventId and sessionId together take ${bytes} bytes in UTF-8; at most ${MAX_ID_KEY_BYTES}` },
    ]);
  }
}

/**
 * Validates drafts at the store boundary (ValidationError on bad input). The envelope is checked
 * by hand (it is on every append's hot path); each payload is parsed once by its type's schema.
 */
export function prepareDrafts(drafts: readonly unknown[], where: string, sessionId?: string): PreparedDraft[] {
  if (!Array.isArray(drafts)) parseInput(z.array(EventDraft), drafts, where);
  return drafts.map((raw, i) => {
    const ahead = typeof raw === 'object' && raw !== null ? preparedAhead.get(raw) : undefined;
    if (ahead !== undefined && (sessionId === undefined || ahead.sessionId === sessionId)) return ahead.draft;
    try {
      return prepareDraft(raw, i, where, sessionId);
    } catch (e) {
      // a getter that throws while the draft is read: a ValidationError naming it
      throw e instanceof ValidationError ? e : unreadable(raw, `${where}: drafts[${i}]`, e);
    }
  });
}

/** Drafts a session's writer prepared before appending them (prepareAhead), by draft object. */
const preparedAhead = new WeakMap<object, { sessionId: string; draft: PreparedDraft }>();

/**
 * prepareDrafts for a session's own writer, ahead of the append (LogWriter.commitAhead: the next
 * model request is built over the messages these drafts add). The store's prepareDrafts then takes
 * each draft object's preparation as it is, so the append validates and encodes it once and
 * stores exactly the payloads the request was built from.
 */
export function prepareAhead(drafts: readonly EventDraft[], where: string, sessionId: string): PreparedDraft[] {
  const out = prepareDrafts(drafts, where, sessionId);
  drafts.forEach((d, i) => preparedAhead.set(d, { sessionId, draft: out[i]! }));
  return out;
}

/** The keys a draft may have (EventDraft is strict: a key it does not name is refused, never dropped). */
const DRAFT_KEYS: ReadonlySet<string> = new Set(Object.keys(EventDraft.shape));

function prepareDraft(raw: unknown, i: number, where: string, sessionId: string | undefined): PreparedDraft {
  const d = raw as Partial<EventDraft> | null;
  const ok =
    d !== null &&
    typeof d === 'object' &&
    Object.keys(d).every((k) => DRAFT_KEYS.has(k)) &&
    typeof d.type === 'string' &&
    Object.hasOwn(EventPayloads, d.type) &&
    isNonNegInt(d.turn) &&
    isNonNegInt(d.step) &&
    isNonNegInt(d.attempt) &&
    (d.eventId === undefined || isId(d.eventId)) &&
    typeof d.payload === 'object' &&
    d.payload !== null &&
    !Array.isArray(d.payload);
  if (!ok) parseInput(EventDraft, raw, `${where}: drafts[${i}]`); // throws with the precise issues
  if (sessionId !== undefined && d!.eventId !== undefined) assertEventIdFits(sessionId, d!.eventId, where, ['drafts', i, 'eventId']);
  const type = d!.type as EventType;
  const op = SURFACE_OPS[type];
  if (d!.surfaceOp !== op) {
    throw new ValidationError(where, [
      { path: ['drafts', i, 'surfaceOp'], message: `${type} is always written with surfaceOp "${op}", got "${String(d!.surfaceOp)}"` },
    ]);
  }
  const parsed = parseInput(EventPayloads[type], d!.payload, `${where}: drafts[${i}].payload (${type})`);
  let payloadJson: string;
  try {
    payloadJson = JSON.stringify(parsed);
  } catch (e) {
    // a BigInt or a cycle inside an unknown-typed field (tool arguments, stateContext)
    throw new ValidationError(where, [{ path: ['drafts', i, 'payload'], message: `${type}: not JSON: ${(e as Error).message}` }]);
  }
  return {
    eventId: d!.eventId ?? '', // generated with its seq, in toRecord
    callerId: d!.eventId !== undefined,
    type,
    turn: d!.turn!,
    step: d!.step!,
    attempt: d!.attempt!,
    surfaceOp: op,
    // plain JSON, exactly what a later read returns (and shared with no caller)
    payload: JSON.parse(payloadJson) as Record<string, unknown>,
    payloadJson,
  };
}

/** Stable JSON (sorted keys) used to compare a retried draft with the stored event. */
export function canonicalJson(value: unknown): string {
  assertJson(value, 'canonicalJson'); // a cycle or a BigInt: a ValidationError, never a stack overflow
  return canonical(value);
}

function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  const keys = Object.keys(value as object)
    .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

export function sameContent(d: PreparedDraft, e: EventRecord): boolean {
  return (
    d.type === e.type &&
    d.turn === e.turn &&
    d.step === e.step &&
    d.attempt === e.attempt &&
    d.surfaceOp === e.surfaceOp &&
    canonicalJson(d.payload) === canonicalJson(e.payload)
  );
}

/**
 * Event ids the store generates carry their seq (`<seq>-<uuid>`), so they are found without an
 * index entry: only caller-chosen ids — the ones idempotency rests on — are indexed. An index
 * entry per event would be a random B-tree insert, more dirty pages in every commit.
 */
export const generatedEventId = (seq: number): string => `${seq}-${randomUUID()}`;

const GENERATED = /^([1-9][0-9]{0,15})-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * The event stored with `eventId`: at the seq the index gives (caller-chosen ids), else at the
 * seq a generated id carries, if the event there has that id. Each event is read once.
 * `eventAt(seq, indexed)`: an indexed seq must hold an event (a missing one is corruption: throw);
 * a seq taken from an id may lie past the tail (undefined).
 */
export function findEvent(
  eventId: string,
  indexed: (id: string) => number | undefined,
  eventAt: (seq: number, indexed: boolean) => EventRecord | undefined,
): EventRecord | undefined {
  const seq = indexed(eventId);
  if (seq !== undefined) {
    const e = eventAt(seq, true);
    if (e && e.eventId !== eventId)
      throw new CorruptLogError(
        e.sessionId,
        seq,
        `the id index sends ${JSON.stringify(eventId)} to seq ${seq}, ` + `which holds ${JSON.stringify(e.eventId)}`,
      );
    return e;
  }
  const m = GENERATED.exec(eventId);
  if (!m) return undefined;
  const e = eventAt(Number(m[1]), false);
  return e?.eventId === eventId ? e : undefined;
}

export function toRecord(sessionId: string, seq: number, writerEpoch: number, d: PreparedDraft, occurredAt: string): EventRecord {
  return {
    sessionId,
    seq,
    turn: d.turn,
    step: d.step,
    attempt: d.attempt,
    writerEpoch,
    eventId: d.callerId ? d.eventId : generatedEventId(seq),
    type: d.type,
    surfaceOp: d.surfaceOp,
    payload: d.payload,
    occurredAt,
    schemaVersion: SCHEMA_VERSION,
  };
}

/**
 * A record's stored JSON text. The payload's text is passed in when the append already has it
 * (it is most of the record); decodeRecord validates the whole record on the way back.
 */
export const encodeRecord = (r: EventRecord, payloadJson: string = JSON.stringify(r.payload)): string =>
  `{"sessionId":${JSON.stringify(r.sessionId)},"seq":${r.seq},"turn":${r.turn},"step":${r.step},"attempt":${r.attempt},` +
  `"writerEpoch":${r.writerEpoch},"eventId":${JSON.stringify(r.eventId)},"type":${JSON.stringify(r.type)},` +
  `"surfaceOp":${JSON.stringify(r.surfaceOp)},"payload":${payloadJson},"occurredAt":${JSON.stringify(r.occurredAt)},` +
  `"schemaVersion":${JSON.stringify(r.schemaVersion)}}`;

const SURFACE_OP_AT = ',"surfaceOp":"';
const CURRENT_VERSION_END = `,"schemaVersion":${JSON.stringify(SCHEMA_VERSION)}}`;

/**
 * The start of the text encodeRecord writes for `sessionId`'s records (`{"sessionId":…,"seq":`),
 * for encodedOffSurface; made once per read.
 */
export const encodedKeyPrefix = (sessionId: string): string => `{"sessionId":${JSON.stringify(sessionId)},"seq":`;

/**
 * Whether a record's text, as encodeRecord wrote it, is the record at `seq` of the session whose
 * `encodedKeyPrefix` is `prefix`, in today's schema version, with surfaceOp "none" — read from
 * the text without parsing it. The envelope's surfaceOp comes before the payload, and a quote
 * inside a JSON string is escaped, so the first match is the envelope's. Any other text (stored
 * under the wrong key, a newer version, another encoding) answers false: it is decoded, which
 * reports it.
 */
export function encodedOffSurface(json: string, prefix: string, seq: number): boolean {
  if (!json.startsWith(prefix) || !json.endsWith(CURRENT_VERSION_END)) return false;
  const seqText = String(seq);
  if (!json.startsWith(seqText, prefix.length) || json.charCodeAt(prefix.length + seqText.length) !== 44 /* , */) return false;
  const i = json.indexOf(SURFACE_OP_AT, prefix.length);
  return i > 0 && json.startsWith('none"', i + SURFACE_OP_AT.length);
}

/**
 * Decodes and validates one stored record. Anything wrong is a CorruptLogError naming session
 * and seq; a newer schema version an UnknownSchemaVersionError naming it.
 */
export function decodeRecord(sessionId: string, seq: number, raw: unknown): EventRecord {
  if (typeof raw !== 'string')
    throw new CorruptLogError(sessionId, seq, `stored value is ${raw === undefined ? 'missing' : typeof raw}, not JSON text`);
  let obj: unknown;
  try {
    obj = JSON.parse(raw);
  } catch (e) {
    throw new CorruptLogError(sessionId, seq, `undecodable record (${(e as Error).message}; ${raw.length} bytes)`);
  }
  const version = (obj as { schemaVersion?: unknown } | null)?.schemaVersion;
  if (typeof version === 'string' && !KNOWN_SCHEMA_VERSIONS.includes(version)) {
    throw new UnknownSchemaVersionError(sessionId, seq, version);
  }
  const rec = EventRecord.safeParse(obj);
  if (!rec.success) {
    // only the type unknown, and shaped as ours are (`area/name`): a newer build added it
    const type = (obj as { type?: unknown }).type;
    if (
      typeof version === 'string' &&
      typeof type === 'string' &&
      /^[a-z][a-z-]*\/[a-z][a-z-]*$/.test(type) &&
      rec.error.issues.every((i) => i.path.length === 1 && i.path[0] === 'type')
    )
      throw new UnknownSchemaVersionError(sessionId, seq, version, type);
    throw new CorruptLogError(sessionId, seq, `record fails its schema: ${rec.error.issues[0]?.message ?? 'invalid'}`);
  }
  const r = rec.data;
  if (r.sessionId !== sessionId || r.seq !== seq) {
    throw new CorruptLogError(sessionId, seq, `record is stored under the wrong key (says ${r.sessionId}#${r.seq})`);
  }
  const payload = EventPayloads[r.type].safeParse(r.payload);
  // the id rule is checked on what is written: a record logged before it is read as it was
  if (!payload.success && !payload.error.issues.every(isIdRuleIssue)) {
    throw new CorruptLogError(sessionId, seq, `${r.type} payload fails its schema: ${payload.error.issues[0]?.message ?? 'invalid'}`);
  }
  return r;
}

/**
 * Decodes a record whose stored text passed its checksum (checksum.ts). That text is what an
 * append wrote after validating the draft (prepareDrafts), so the payload's zod schema is not run
 * again: damage is the checksum's to catch, and the envelope is checked by hand (key, schema
 * version, type and its surface op, the fields' types). Anything unexpected takes decodeRecord's
 * full validation, which names the problem. `verify` decodes every record fully (verify-walk.ts).
 * On a long surface this is most of what opening a session costs.
 */
export function decodeSealed(sessionId: string, seq: number, json: string): EventRecord {
  let r: EventRecord;
  try {
    r = JSON.parse(json) as EventRecord;
  } catch {
    return decodeRecord(sessionId, seq, json); // names the JSON error
  }
  const ok =
    r !== null &&
    typeof r === 'object' &&
    r.sessionId === sessionId &&
    r.seq === seq &&
    r.schemaVersion === SCHEMA_VERSION &&
    typeof r.type === 'string' &&
    Object.hasOwn(SURFACE_OPS, r.type) &&
    r.surfaceOp === SURFACE_OPS[r.type] &&
    isNonNegInt(r.turn) &&
    isNonNegInt(r.step) &&
    isNonNegInt(r.attempt) &&
    isNonNegInt(r.writerEpoch) &&
    r.writerEpoch > 0 &&
    typeof r.eventId === 'string' &&
    r.eventId.length > 0 &&
    typeof r.occurredAt === 'string' &&
    typeof r.payload === 'object' &&
    r.payload !== null &&
    !Array.isArray(r.payload);
  return ok ? r : decodeRecord(sessionId, seq, json);
}

export function invariant(cond: unknown, message: string, details: Record<string, unknown> = {}): asserts cond {
  if (!cond) throw new InvariantViolation(message, details);
}
