import { ValidationError } from '../contracts/errors.js';
import { entryIdOf, InboxEntry, type InboxReceipt } from '../contracts/inbox.js';
import { parseInput } from '../contracts/validate.js';
import { SessionIdInput } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { WorkStore } from '../persistence/work-store.js';

/** The store's inbox, or a ValidationError naming what lacks it. */
export function workOf(store: EventStore, where: string): WorkStore {
  if (!store.work)
    throw new ValidationError(where, [
      { path: ['store'], message: 'this store has no inbox (store.work): use lmdbStore, postgresStore or memoryStore' },
    ]);
  return store.work;
}

/**
 * `runtime.submit`: validates the entry and records it durably in the session's inbox (never
 * attaching a writer). Resolves with the receipt once it is durable, or refused with the reason.
 */
export async function submitEntry(store: EventStore, sessionId: string, entry: InboxEntry): Promise<InboxReceipt> {
  parseInput(SessionIdInput, sessionId, 'runtime.submit: sessionId');
  const e = parseInput(InboxEntry, entry, 'runtime.submit: entry');
  const out = await workOf(store, 'runtime.submit').submit(sessionId, e);
  return {
    sessionId,
    entryId: entryIdOf(e),
    kind: e.kind,
    status: out.status,
    ...(out.reason !== undefined ? { reason: out.reason } : {}),
  };
}
