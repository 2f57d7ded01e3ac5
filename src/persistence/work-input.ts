import { z } from 'zod';
import { IdInput, SessionIdInput } from '../contracts/ids.js';
import { InboxEntry, InboxOutcome } from '../contracts/inbox.js';
import { parseInput } from '../contracts/validate.js';
import { assertSessionId } from './store-input.js';

// The inputs every WorkStore checks at its boundary (memory, LMDB and PostgreSQL alike).
export const Positive = z.number().int().positive();
export const Claim = z.strictObject({ limit: z.number().int().positive().max(10_000), leaseMs: z.number().int().positive() });
export const Marks = z.array(z.strictObject({ entryId: IdInput, outcome: InboxOutcome }));
export const WorkerId = IdInput.max(400);
export const Leases = z.array(z.strictObject({ sessionId: SessionIdInput, writerEpoch: Positive }));
export const Registration = z.strictObject({
  workerId: WorkerId,
  host: z.string(),
  pid: z.number().int(),
  concurrency: z.number().int().positive(),
});
export const ReleaseOptions = z.strictObject({ resume: z.boolean() });

/**
 * Each WorkStore operation's arguments checked (a ValidationError naming the operation and the
 * field), one rule for every backend; what is parsed is returned.
 */
export const workArgs = {
  submit(sessionId: string, entry: unknown): InboxEntry {
    assertSessionId(sessionId, 'work.submit');
    return parseInput(InboxEntry, entry, 'work.submit: entry');
  },
  pending(sessionId: string): void {
    assertSessionId(sessionId, 'work.pending');
  },
  getEntry(sessionId: string, entryId: string): void {
    assertSessionId(sessionId, 'work.getEntry');
    parseInput(IdInput, entryId, 'work.getEntry: entryId');
  },
  markApplied(sessionId: string, writerEpoch: number, marks: unknown): z.output<typeof Marks> {
    assertSessionId(sessionId, 'work.markApplied');
    parseInput(Positive, writerEpoch, 'work.markApplied: writerEpoch');
    return parseInput(Marks, marks, 'work.markApplied: marks');
  },
  claim(workerId: string, options: unknown): z.output<typeof Claim> {
    parseInput(WorkerId, workerId, 'work.claim: workerId');
    return parseInput(Claim, options, 'work.claim: options');
  },
  bind(sessionId: string, workerId: string, writerEpoch: number, leaseMs: number): void {
    assertSessionId(sessionId, 'work.bind');
    parseInput(WorkerId, workerId, 'work.bind: workerId');
    parseInput(Positive, writerEpoch, 'work.bind: writerEpoch');
    parseInput(Positive, leaseMs, 'work.bind: leaseMs');
  },
  renew(workerId: string, leases: unknown, leaseMs: number): z.output<typeof Leases> {
    parseInput(WorkerId, workerId, 'work.renew: workerId');
    const l = parseInput(Leases, leases, 'work.renew: leases');
    parseInput(Positive, leaseMs, 'work.renew: leaseMs');
    return l;
  },
  release(sessionId: string, workerId: string, writerEpoch: number | null, options: unknown): void {
    assertSessionId(sessionId, 'work.release');
    parseInput(WorkerId, workerId, 'work.release: workerId');
    parseInput(Positive.nullable(), writerEpoch, 'work.release: writerEpoch');
    parseInput(ReleaseOptions, options, 'work.release: options');
  },
  heartbeat(worker: unknown, ttlMs: number): z.output<typeof Registration> {
    const w = parseInput(Registration, worker, 'work.heartbeat: worker');
    parseInput(Positive, ttlMs, 'work.heartbeat: ttlMs');
    return w;
  },
  removeWorker(workerId: string): void {
    parseInput(WorkerId, workerId, 'work.removeWorker: workerId');
  },
};
