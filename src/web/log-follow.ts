import type { EventRecord } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';

export interface FollowLogOptions {
  /** How often the head is checked for appends made by another process the store does not announce. */
  pollMs: number;
  signal: AbortSignal;
}

/**
 * The session's log from `fromSeq` on, then every later append, each seq exactly once and in
 * order, until `signal` aborts. The log is always read from the cursor (`readEvents`); what
 * wakes the reader is `store.events$` (appends through this store object, and on PostgreSQL every
 * process's, by LISTEN/NOTIFY) or, every `pollMs`, the session head having moved (LMDB has no
 * cross-process notification: another process's appends are found by this poll). A wake-up that
 * is lost only delays a record, never loses one.
 */
export async function* followLog(
  store: EventStore,
  sessionId: string,
  fromSeq: number,
  options: FollowLogOptions,
): AsyncGenerator<EventRecord> {
  const { signal, pollMs } = options;
  let next = fromSeq;
  while (!signal.aborted) {
    for await (const r of store.readEvents(sessionId, { fromSeq: next })) {
      if (signal.aborted) return;
      if (r.seq !== next) throw new Error(`log gap in session ${sessionId}: expected seq ${next}, read ${r.seq}`);
      next = r.seq + 1;
      yield r;
    }
    // aborted while the reader held the last record: an abort listener added now would never fire
    if (signal.aborted) return;
    await nextAppend(store, sessionId, next, pollMs, signal);
  }
}

/** Resolves once the log may hold `next` (woken, or the head moved), or the signal aborts. */
function nextAppend(store: EventStore, sessionId: string, next: number, pollMs: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal.aborted) return resolve(); // an abort listener added now would never fire
    let timer: ReturnType<typeof setTimeout> | undefined;
    let done = false;
    let sub: { unsubscribe(): void } | undefined;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sub?.unsubscribe();
      signal.removeEventListener('abort', finish);
      resolve();
    };
    // any emission is news (its record is read again from the cursor); an error (an append this
    // store object did not see, so a gap in its live feed) is news as well
    signal.addEventListener('abort', finish, { once: true }); // before the subscribe, which may finish at once
    sub = store.events$(sessionId, { fromSeq: next }).subscribe({ next: finish, error: finish });
    if (done) sub.unsubscribe(); // it finished during the subscribe
    const poll = () => {
      timer = setTimeout(() => {
        store.getHead(sessionId).then(
          (head) => ((head?.lastSeq ?? 0) >= next ? finish() : done || poll()),
          () => finish(), // the read after the wake-up reports the store's error
        );
      }, pollMs);
    };
    if (!done) poll();
  });
}
