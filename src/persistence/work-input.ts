import { z } from 'zod';
import { InboxOutcome } from '../contracts/inbox.js';

// The inputs every WorkStore checks at its boundary (memory, LMDB and PostgreSQL alike).
export const Positive = z.number().int().positive();
export const Claim = z.strictObject({ limit: z.number().int().positive().max(10_000), leaseMs: z.number().int().positive() });
export const Marks = z.array(z.strictObject({ entryId: z.string().min(1), outcome: InboxOutcome }));
export const Leases = z.array(z.strictObject({ sessionId: z.string().min(1), writerEpoch: Positive }));
export const Registration = z.strictObject({
  workerId: z.string().min(1),
  host: z.string(),
  pid: z.number().int(),
  concurrency: z.number().int().positive(),
});
export const WorkerId = z.string().min(1).max(400);
export const ReleaseOptions = z.strictObject({ resume: z.boolean() });
