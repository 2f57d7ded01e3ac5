import type { ToolOutcome } from './tools.js';

/**
 * The lock rule (DESIGN §4 item 5), in one place: a call given up on while it may still be running
 * — `uncertain-hanging`, or `cancelled` without settling — keeps its declared resources locked
 * until they are released; a completed call may release resources it names.
 */
export function locksHeldBy(outcome: ToolOutcome): readonly string[] {
  if (outcome.kind === 'uncertain-hanging' || (outcome.kind === 'cancelled' && !outcome.settled)) return outcome.resourceLocks;
  return [];
}

/** An outcome after which the call may still be running (its resources stay locked). */
export const mayStillRun = (o: ToolOutcome): boolean => o.kind === 'uncertain-hanging' || (o.kind === 'cancelled' && !o.settled);

/** The resources of `resources` that `held` locks, in order, each once. */
export function lockedAmong(resources: readonly string[], held: ReadonlySet<string>): string[] {
  if (held.size === 0) return [];
  return [...new Set(resources.filter((r) => held.has(r)))];
}

/** Whether two calls' resources overlap (such calls never run at the same time). */
export const overlaps = (a: readonly string[], b: readonly string[]): boolean => a.some((r) => b.includes(r));

/**
 * Applies one committed outcome to the set of held locks: what it locks is added, what a completed
 * call releases is removed.
 */
export function applyOutcomeLocks(held: Set<string>, outcome: ToolOutcome): void {
  for (const k of locksHeldBy(outcome)) held.add(k);
  if (outcome.kind === 'completed') for (const k of outcome.releaseResources) held.delete(k);
}
