import type { EventRecord } from '../contracts/events.js';
import { applyOutcomeLocks } from '../contracts/locks.js';
import type { ToolOutcome } from '../contracts/tools.js';
import { Surface } from './surface.js';

/**
 * What a session's live writer knows of its log, kept current by the log writer as each append
 * commits (the one projection of committed records): the model-visible surface, the resource
 * locks uncertain calls hold, the seq of each `tool/call` whose result is not committed yet (a
 * `tool_start`'s logSeq) and the newest `run/end`.
 */
export class SessionProjection {
  readonly callSeqs = new Map<string, number>();
  readonly heldLocks: Set<string>;
  lastRunEnd: { runId: string; attemptId: string; seq: number } | undefined;

  constructor(
    readonly surface: Surface = new Surface(),
    heldLocks: Iterable<string> = [],
  ) {
    this.heldLocks = new Set(heldLocks);
  }

  apply(records: readonly EventRecord[]): void {
    this.surface.apply(records);
    for (const r of records) {
      const p = r.payload;
      if (r.type === 'tool/call') this.callSeqs.set(p.callId as string, r.seq);
      else if (r.type === 'tool/result' && p.copiedFrom === undefined) {
        this.callSeqs.delete(p.callId as string);
        applyOutcomeLocks(this.heldLocks, p.outcome as ToolOutcome);
      } else if (r.type === 'resources/released') for (const k of p.keys as string[]) this.heldLocks.delete(k);
      else if (r.type === 'run/end') this.lastRunEnd = { runId: p.runId as string, attemptId: p.attemptId as string, seq: r.seq };
    }
  }
}
