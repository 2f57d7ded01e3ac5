import { z } from 'zod';
import type { EventRecord } from '../contracts/events.js';
import { parseInput } from '../contracts/validate.js';
import { IdInput, isId, isSessionId, SessionIdInput } from '../contracts/ids.js';
import type { EventStore } from './event-store.js';

const Range = z.strictObject({
  fromSeq: z.number().int().positive().optional(),
  toSeq: z.number().int().nonnegative().optional(),
});

/** Validates a session id; the hot path checks by hand, zod reports a failure's issues. */
export function assertSessionId(sessionId: unknown, where: string): asserts sessionId is string {
  if (isSessionId(sessionId)) return;
  parseInput(SessionIdInput, sessionId, `${where}: sessionId`);
}

/** Validates getEventById's id (the id rule, IdInput; one too long to be stored is simply not found). */
export function assertEventId(eventId: unknown, where: string): asserts eventId is string {
  if (isId(eventId)) return;
  parseInput(IdInput, eventId, `${where}: eventId`);
}

const isPositiveInt = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v > 0;

const Positive = z.number().int().positive();

/** Validates append's scalar arguments (the drafts are validated by prepareDrafts). */
export function assertAppendArgs(sessionId: unknown, writerEpoch: unknown, expectedSeq: unknown): void {
  assertSessionId(sessionId, 'append');
  if (!isPositiveInt(writerEpoch)) parseInput(Positive, writerEpoch, 'append: writerEpoch');
  if (!isPositiveInt(expectedSeq)) parseInput(Positive, expectedSeq, 'append: expectedSeq');
}

export function readRange(sessionId: unknown, range: unknown): { fromSeq: number; toSeq: number } {
  assertSessionId(sessionId, 'readEvents');
  const r = parseInput(Range, range ?? {}, 'readEvents: range');
  return { fromSeq: r.fromSeq ?? 1, toSeq: r.toSeq ?? Number.MAX_SAFE_INTEGER };
}

const FollowOptions = z.strictObject({ fromSeq: z.number().int().positive().optional() });

/** Validates events$'s arguments; returns the seq to follow from. */
export function followFrom(sessionId: unknown, options: unknown): number {
  assertSessionId(sessionId, 'events$');
  return parseInput(FollowOptions, options === undefined ? {} : options, 'events$: options').fromSeq ?? 1;
}

/**
 * Every store's `loadSurface`: the model-visible events from the head's surface epoch up to the
 * head it read (an append made meanwhile, a new epoch perhaps, is not mixed in).
 */
export async function surfaceOf(store: Pick<EventStore, 'getHead' | 'readEvents'>, sessionId: string): Promise<EventRecord[]> {
  const head = await store.getHead(sessionId);
  if (!head) return [];
  const out: EventRecord[] = [];
  for await (const e of store.readEvents(sessionId, { fromSeq: head.surfaceStartSeq, toSeq: head.lastSeq }))
    if (e.surfaceOp !== 'none') out.push(e);
  return out;
}
