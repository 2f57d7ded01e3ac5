import { randomUUID } from 'node:crypto';
import { isStoreUnavailableError, StoreClosedError, StoreUnavailableError, ValidationError } from '../contracts/errors.js';
import type { Clock } from '../contracts/clock.js';
import type { ExecutionSession } from './execution-session.js';
import { SessionInbox } from './inbox.js';
import type { OpenSessions } from './open-sessions.js';
import { entryIdOf, InboxEntry, type InboxReceipt } from '../contracts/inbox.js';
import { parseInput } from '../contracts/validate.js';
import { SessionIdInput } from '../contracts/ids.js';
import { toMessages } from '../contracts/requests.js';
import { DEFAULT_CONTENT_LIMITS, storeMessages, type ContentLimits } from '../persistence/content-parts.js';
import type { EventStore } from '../persistence/event-store.js';
import type { WorkStore } from '../persistence/work-store.js';
import { childSessionRefusal, recordedParent } from './recorded-agent.js';
import { runIdTaken } from './run-claims.js';
import { assertRunIdsFit, runOpenEventId } from '../persistence/run-ids.js';

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
export async function submitEntry(
  store: EventStore,
  sessionId: string,
  entry: InboxEntry,
  limits: ContentLimits = DEFAULT_CONTENT_LIMITS,
): Promise<InboxReceipt> {
  parseInput(SessionIdInput, sessionId, 'runtime.submit: sessionId');
  let e = parseInput(InboxEntry, entry, 'runtime.submit: entry');
  const work = workOf(store, 'runtime.submit');
  // a child session has no inbox: a worker claiming it would run it outside its parent's call
  const parent = await recordedParent(store, sessionId);
  if (parent) throw childSessionRefusal('runtime.submit', sessionId, parent);
  await assertEntryCanRun(store, work, sessionId, e);
  // an input's images and files: stored as blobs first, so the inbox (and the log) hold references
  if (e.kind === 'input' && typeof e.message !== 'string')
    e = { ...e, message: await storeMessages(toMessages(e.message), store.blobs, limits, 'runtime.submit: entry.message') };
  const entryId = entryIdOf(e);
  const out = await work.submit(sessionId, e).catch((err: unknown) => {
    // the id (generated for a bare-string prompt) goes with the error, so a retry is recognised
    if (!isStoreUnavailableError(err)) throw err;
    throw new StoreUnavailableError(err.message, err.outcome, {
      cause: err.cause,
      ...(err.sqlState !== undefined ? { sqlState: err.sqlState } : {}),
      entryId,
    });
  });
  return {
    sessionId,
    entryId,
    kind: e.kind,
    status: out.status,
    ...(out.reason !== undefined ? { reason: out.reason } : {}),
  };
}

/**
 * Refuses (ValidationError, before anything is stored) an entry its owner could never apply, as
 * the in-process call refuses it: the run ids it makes must fit the store's id key with the
 * session id (an input runs as runId = attemptId = inputId; a respond naming its run is attempt
 * `entryId` of it), and an input's id must name no run of the session in the log — unless that very
 * input is in the inbox or the log already (its run exists because it was applied: the store
 * then answers `already_accepted`, or `refused` for other content). The entry is read after the
 * run: an input applied meanwhile was stored before its run began, so it is seen. A run started
 * after these reads (a prompt racing the submit) gets the entry rejected when it is applied, and
 * `waitForResult` says so (InputRejectedError).
 */
async function assertEntryCanRun(store: EventStore, work: WorkStore, sessionId: string, e: InboxEntry): Promise<void> {
  if (e.kind === 'respond' && e.runId !== undefined) assertRunIdsFit(sessionId, e.runId, e.entryId, 'runtime.submit', ['runId', 'entryId']);
  if (e.kind !== 'input') return;
  assertRunIdsFit(sessionId, e.inputId, e.inputId, 'runtime.submit', ['inputId', 'inputId']);
  const head = await store.getHead(sessionId);
  const named =
    head?.openRun?.runId === e.inputId ||
    head?.lastSettledRun?.runId === e.inputId ||
    (head !== undefined && (await store.getEventById(sessionId, runOpenEventId(e.inputId))) !== undefined);
  if (!named) return;
  if ((await work.getEntry(sessionId, e.inputId)) || (await store.getEventById(sessionId, `input:${e.inputId}`))) return;
  throw runIdTaken(sessionId, e.inputId, 'inputId', 'runtime.submit');
}

/** `runtime.submit`'s entry: a bare string is a prompt, a follow-up input with a new id. */
export function promptEntry(entry: InboxEntry | string): InboxEntry {
  return typeof entry === 'string' ? { kind: 'input', inputId: randomUUID(), mode: 'follow_up', message: entry } : entry;
}

/**
 * One inbox applier per open session, made on first use: a serving worker's drain and
 * `runtime.submit`'s fast path share it.
 */
export function sessionInboxes(store: EventStore, clock: Clock): (session: ExecutionSession) => SessionInbox {
  const inboxes = new WeakMap<ExecutionSession, SessionInbox>();
  return (session) => {
    let inbox = inboxes.get(session);
    if (!inbox) inboxes.set(session, (inbox = new SessionInbox(session, store, workOf(store, 'runtime.submit'), clock)));
    return inbox;
  };
}

/**
 * `runtime.submit` of a runtime that may have the session open: records the entry, then (this
 * runtime being the session's writer) applies it at once, as a worker's drain would.
 */
export async function submitToOpen(
  store: EventStore,
  sessions: OpenSessions,
  inboxFor: (session: ExecutionSession) => SessionInbox,
  sessionId: string,
  entry: InboxEntry,
  limits: ContentLimits,
): Promise<InboxReceipt> {
  if (sessions.closed) throw new StoreClosedError('runtime');
  const receipt = await submitEntry(store, sessionId, entry, limits);
  const open = receipt.status === 'refused' ? undefined : sessions.latest(sessionId);
  // (a drain that fails leaves the entry pending and is tried again: SessionInbox.drainRetrying)
  if (open) inboxFor(open).drainRetrying();
  return receipt;
}
