import type { EventRecord } from '../contracts/events.js';
import type { EventStore } from './event-store.js';
import type { SessionHead } from './head.js';
import { awaitedRequest, foldRunEvents, type OpenRunState } from './open-run.js';

/** The session's records from `fromSeq` (to `toSeq`, if given), in seq order. */
export async function collectEvents(store: EventStore, sessionId: string, fromSeq: number, toSeq?: number): Promise<EventRecord[]> {
  const out: EventRecord[] = [];
  for await (const e of store.readEvents(sessionId, toSeq === undefined ? { fromSeq } : { fromSeq, toSeq })) out.push(e);
  return out;
}

/**
 * The open run's fold, read from its start (O(run), never the whole history) — and the few events
 * before it since the last settled run: a cancel sent as the run's first attempt was starting can
 * land ahead of its `run/start` (RunControl appends it at once); naming that attempt, it is the run's.
 */
export async function loadOpenRun(store: EventStore, sessionId: string, head: SessionHead | undefined): Promise<OpenRunState | undefined> {
  if (!head?.openRun) return undefined;
  const { startSeq } = head.openRun;
  const from = Math.max(1, startSeq - LOOK_BEHIND, (head.lastSettledRun?.endSeq ?? 0) + 1);
  return foldRunEvents(await collectEvents(store, sessionId, from));
}

/** How far before an open run's start its fold looks for a cancel that landed ahead of it. */
const LOOK_BEHIND = 16;

/**
 * Whether the session's log has a run left for a worker to continue: open (started, not settled)
 * and not resting on a question or approval whose answer it waits for — the run an open of the
 * session finds `detached`, whatever left it so (a crash, a detach, a close). Read from the store
 * alone: nothing the closed session remembers decides it.
 */
export async function runLeftOpen(store: EventStore, sessionId: string): Promise<boolean> {
  const head = await store.getHead(sessionId);
  if (!head?.openRun) return false;
  const open = await loadOpenRun(store, sessionId, head);
  return open !== undefined && awaitedRequest(open) === undefined;
}
