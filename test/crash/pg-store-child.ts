/**
 * Child program for the PostgreSQL crash and fencing tests: a real process writing to a
 * PostgreSQL event store, so the parent can SIGKILL or SIGSTOP it at any instant.
 *
 *   node --import tsx test/crash/pg-store-child.ts <mode> <url> <schema> ...
 *
 * - `append <url> <schema> <s1,s2,…>`: attaches each session (`ATTACHED <s> <epoch> <lastSeq>`),
 *   then appends batches of 1..5 drafts to all sessions concurrently, printing `ACK <s> <firstSeq>
 *   <lastSeq> <batchId>` only after the append resolved. Runs until killed.
 * - `fence <url> <schema> <s> [--batches=K] [--pause=between|inside]`: attaches, appends K
 *   batches; then pauses — `between`: prints `PAUSE_OK` outside any transaction; `inside`: starts
 *   batch K+1 and, inside its transaction (after its writes, before COMMIT), prints `IN_TXN` —
 *   and waits for `GO` on stdin. Then it finishes that append (inside) and appends with its old
 *   epoch at its own tail and at the current tail, printing `ACK …` + `LEAKED` or `REFUSED
 *   <ErrorName> <currentEpoch>` for each, then `DONE`.
 * With `--wait-go` it prints `READY` once loaded and starts only on `GO`.
 */
import { isStaleWriterError } from '../../src/contracts/errors.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { batchDrafts, batchIdOf, nextLine, randomBatchSize, say } from './child-util.js';

const [mode, url, schema, ...rest] = process.argv.slice(2);
const positional = rest.filter((a) => !a.startsWith('--'));
const flags = new Map<string, string>(
  rest
    .filter((a) => a.startsWith('--'))
    .map((a) => {
      const [k, v] = a.slice(2).split('=');
      return [k!, v ?? 'true'];
    }),
);
const intFlag = (name: string, fallback: number): number => (flags.has(name) ? Number(flags.get(name)) : fallback);
const waitForCue = (cue: string): Promise<string> => nextLine((line) => line === cue);
/** The idle-in-transaction timeout, short so that a takeover from a frozen writer is quick. */
const IDLE_MS = intFlag('idle-ms', 1500);

async function appendMode(): Promise<void> {
  const store = postgresStore({ connectionString: url!, schema: schema!, idleInTransactionTimeoutMs: IDLE_MS });
  await Promise.all(
    positional[0]!.split(',').map(async (s) => {
      const { writerEpoch, lastSeq } = await store.attachWriter(s);
      say(`ATTACHED ${s} ${writerEpoch} ${lastSeq}`);
      let next = lastSeq + 1;
      for (let n = 1; ; n++) {
        const size = randomBatchSize();
        const id = batchIdOf(writerEpoch, n);
        const stored = await store.append(s, writerEpoch, next, batchDrafts(s, id, next, size));
        say(`ACK ${s} ${stored[0]!.seq} ${stored[stored.length - 1]!.seq} ${id}`);
        next += size;
      }
    }),
  );
}

async function tryAppend(
  store: ReturnType<typeof postgresStore>,
  s: string,
  epoch: number,
  seq: number,
  id: string,
  size = 2,
): Promise<void> {
  try {
    const stored = await store.append(s, epoch, seq, batchDrafts(s, id, seq, size));
    say(`ACK ${s} ${stored[0]!.seq} ${stored[stored.length - 1]!.seq} ${id}`);
    say('LEAKED');
  } catch (e) {
    if (!(e instanceof Error)) throw e;
    say(`REFUSED ${e.name} ${isStaleWriterError(e) ? e.currentEpoch : '-'}`);
  }
}

async function fenceMode(): Promise<void> {
  const s = positional[0]!;
  const inside = flags.get('pause') === 'inside';
  let pauseInTxn = false;
  const store = postgresStore({
    connectionString: url!,
    schema: schema!,
    idleInTransactionTimeoutMs: IDLE_MS,
    beforeCommit: async () => {
      if (!pauseInTxn) return;
      pauseInTxn = false;
      say('IN_TXN');
      await waitForCue('GO');
    },
  });
  const { writerEpoch, lastSeq } = await store.attachWriter(s);
  say(`ATTACHED ${s} ${writerEpoch} ${lastSeq}`);
  let next = lastSeq + 1;
  const before = intFlag('batches', 3);
  for (let n = 1; n <= before; n++) {
    const size = randomBatchSize();
    const id = batchIdOf(writerEpoch, n);
    await store.append(s, writerEpoch, next, batchDrafts(s, id, next, size));
    say(`ACK ${s} ${next} ${next + size - 1} ${id}`);
    next += size;
  }
  if (inside) {
    pauseInTxn = true;
    await tryAppend(store, s, writerEpoch, next, batchIdOf(writerEpoch, before + 1));
  } else {
    say('PAUSE_OK');
    await waitForCue('GO');
  }
  await tryAppend(store, s, writerEpoch, next, batchIdOf(writerEpoch, before + 2));
  const head = await store.getHead(s);
  await tryAppend(store, s, writerEpoch, head!.lastSeq + 1, batchIdOf(writerEpoch, before + 3));
  await store.close();
  say('DONE');
}

const modes: Record<string, () => Promise<void>> = { append: appendMode, fence: fenceMode };
const run = modes[mode ?? ''];
if (!run || !url || !schema) {
  say(`ERROR Usage: unknown mode ${String(mode)} or missing url/schema`);
  process.exit(2);
}
(async () => {
  if (flags.has('wait-go')) {
    say('READY');
    await waitForCue('GO');
  }
  await run();
})().then(
  () => process.exit(0),
  (e: unknown) => {
    const err = e instanceof Error ? e : new Error(String(e));
    say(`ERROR ${err.name} ${err.message.replace(/\n/g, ' ')}`);
    process.exit(1);
  },
);
