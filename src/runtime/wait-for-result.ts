import { onAbort } from '../contracts/abort.js';
import { CancelledError, InputRejectedError } from '../contracts/errors.js';
import { WaitForResultOptions } from '../contracts/inbox.js';
import type { ExecutionResult } from '../contracts/requests.js';
import { parseInput } from '../contracts/validate.js';
import { IdInput, SessionIdInput } from '../contracts/ids.js';
import type { EventStore } from '../persistence/event-store.js';
import { runOpenEventId } from '../persistence/run-ids.js';

/** Interruptions: the run goes on with another attempt (a continue), so its result is still to come. */
const INTERRUPTED = new Set(['detached', 'fenced']);

/**
 * The run's result as its log holds it now: the newest attempt's run/end if it is newer than the
 * run's newest run/start and is not an interruption (a settled status, or `suspended`), else
 * undefined. Reads from the run's first event on.
 */
export async function currentRunResult(store: EventStore, sessionId: string, runId: string): Promise<ExecutionResult | undefined> {
  const head = await store.getHead(sessionId);
  if (!head) return undefined;
  let fromSeq: number | undefined;
  if (head.lastSettledRun?.runId === runId) fromSeq = head.lastSettledRun.endSeq ?? head.lastSettledRun.startSeq;
  else if (head.openRun?.runId === runId) fromSeq = head.openRun.startSeq;
  else fromSeq = (await store.getEventById(sessionId, runOpenEventId(runId)))?.seq;
  if (fromSeq === undefined) return undefined;
  let lastStart = 0;
  let lastEnd: { seq: number; result: ExecutionResult; status: string } | undefined;
  for await (const e of store.readEvents(sessionId, { fromSeq })) {
    if (e.payload.runId !== runId) continue;
    if (e.type === 'run/start') lastStart = e.seq;
    else if (e.type === 'run/end') {
      lastEnd = { seq: e.seq, result: e.payload.result as ExecutionResult, status: String(e.payload.status) };
      if (!INTERRUPTED.has(lastEnd.status) && lastEnd.status !== 'suspended') return lastEnd.result; // settled: final
    }
  }
  if (lastEnd && lastEnd.seq > lastStart && !INTERRUPTED.has(lastEnd.status)) return lastEnd.result;
  return undefined;
}

/**
 * Resolves with run `runId`'s result once its log holds one (DESIGN §8, docs/scale-out.md): a
 * settled result, or `suspended` while it waits for an answer (a respond makes a new attempt,
 * whose end a later call waits for). Works from any process and after restarts: it reads the log,
 * woken by the store's appends (`events$`; PostgreSQL: any process's) and polling as a fallback.
 * An inbox input of that id (`runId` = `inputId`) that its owner rejected when it applied it
 * started no run: InputRejectedError with the reason; one not applied yet is waited for (a run of
 * that id in the log before its input is accepted is another run, never its result).
 * Rejects with CancelledError when `signal` aborts.
 */
export async function waitForResult(
  store: EventStore,
  sessionId: string,
  runId: string,
  options: WaitForResultOptions = {},
): Promise<ExecutionResult> {
  parseInput(SessionIdInput, sessionId, 'waitForResult: sessionId');
  parseInput(IdInput, runId, 'waitForResult: runId');
  const o = parseInput(WaitForResultOptions, options, 'waitForResult: options');
  const signal = o.signal;
  let wake: (() => void) | undefined;
  const head = await store.getHead(sessionId);
  const sub = store.events$(sessionId, { fromSeq: (head?.lastSeq ?? 0) + 1 }).subscribe({
    next: (e) => {
      if (e.type === 'run/end' && e.payload.runId === runId) wake?.();
    },
    error: () => undefined,
  });
  const input = new InboxInputCheck(store, sessionId, runId);
  const aborted = () => new CancelledError(`waitForResult(${sessionId}, ${runId}) aborted`);
  try {
    for (;;) {
      if (signal?.aborted) throw aborted();
      const r = (await input.mayHaveRun()) ? await currentRunResult(store, sessionId, runId) : undefined;
      if (r) return r;
      // (checked after the last await: an abort while the log was read fires no listener added now)
      if (signal?.aborted) throw aborted();
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(t);
          off?.();
          wake = undefined;
          resolve();
        };
        const t = setTimeout(done, o.pollMs);
        wake = done;
        const off = signal ? onAbort(signal, done, { release: true }) : undefined;
      });
    }
  } finally {
    sub.unsubscribe();
  }
}

/**
 * What the inbox says of an input whose id is the awaited run's: none, or one whose
 * `input/accepted` is in the log (its run, if any, is its own: wait for it), or one not accepted
 * into the log — not applied yet (no run of that id is its result yet), or rejected when applied
 * (InputRejectedError). Once the log holds the input, nothing is read again.
 */
class InboxInputCheck {
  private accepted = false;

  constructor(
    private readonly store: EventStore,
    private readonly sessionId: string,
    private readonly inputId: string,
  ) {}

  /** Whether a run of this id may be the input's (or there is no such input); throws if it was rejected. */
  async mayHaveRun(): Promise<boolean> {
    if (this.accepted || !this.store.work) return true;
    const stored = await this.store.work.getEntry(this.sessionId, this.inputId);
    if (stored?.entry.kind !== 'input') return true;
    if (await this.store.getEventById(this.sessionId, `input:${this.inputId}`)) return (this.accepted = true);
    const outcome = stored.applied?.outcome;
    if (outcome?.status === 'rejected') throw new InputRejectedError(this.sessionId, this.inputId, outcome.reason ?? 'no reason recorded');
    return stored.applied !== undefined; // applied without its input in the log: read the log as it is
  }
}
