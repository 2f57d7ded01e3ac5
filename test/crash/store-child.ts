/**
 * Child program for the crash, fencing and multi-process tests: a real process writing to an
 * LMDB event store, so the parent can SIGKILL or SIGSTOP it at any instant.
 *
 *   node --import tsx test/crash/store-child.ts <mode> <path> ...
 *
 * Modes (every line it prints is one protocol line on stdout):
 * - `append <path> <s1,s2,…> [--batches=N]`: attaches a writer to each session (`ATTACHED <s>
 *   <epoch> <lastSeq>`), then appends batches of 1..5 drafts to all sessions concurrently, and
 *   prints `ACK <s> <firstSeq> <lastSeq> <batchId>` only after the append promise resolved. Runs
 *   until killed, or prints `DONE` after N batches per session.
 * - `fence-a <path> <s> [--batches=K]`: attaches, appends K batches, prints `PAUSE_OK` (outside any
 *   write transaction) and waits for `GO` on stdin; then appends with its old epoch, first at its
 *   own tail, then at the current tail: prints `REFUSED <ErrorName> <currentEpoch>` or `LEAKED`.
 * - `race <path> <s> [--attaches=M] [--rounds=R]`: opens the store (`OPEN`); then R times: waits
 *   for `GO`, attaches M times (`ATTACHED …` each, then `ATTACH_DONE`), waits for `GO2`, appends
 *   one batch with its last epoch at the current tail (`ACK …` or `REFUSED <ErrorName>
 *   <currentEpoch>`), prints `ROUND_DONE`.
 * - `strace <path> <n> [--ack-early] [--durability=flushed|committed]`: for i in 1..n writes
 *   `BEGIN i`, appends one batch, writes `ACK i` (with --ack-early: before awaiting the append —
 *   a deliberately broken writer, the negative control of the strace test).
 * - `strace-nosync <path> <n>`: the same loop over raw lmdb opened with `noSync`, also writing
 *   each value to a file named like a journal segment without flushing it (the negative control
 *   for "every journal write is flushed before the ACK").
 *
 * - `hold-recovery <path>`: takes the store's recovery lock (the write transaction of
 *   `<path>/recovery/`), prints `LOCKED` and spins inside it until killed.
 *
 * With `--wait-go` (any mode) it prints `READY` once loaded and starts only on `GO`, so that the
 * parent can pre-spawn the next child (loading takes about a second of CPU) while one runs.
 *
 * On any unexpected error it prints `ERROR <name> <message>` and exits 1.
 */
import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { open } from 'lmdb';
import { isStaleWriterError } from '../../src/contracts/errors.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { batchDrafts, batchIdOf, nextLine, randomBatchSize, say } from './child-util.js';

const [mode, path, ...rest] = process.argv.slice(2);
const positional = rest.filter((a) => !a.startsWith('--'));
const flags = new Map(
  rest
    .filter((a) => a.startsWith('--'))
    .map((a) => {
      const [k, v] = a.slice(2).split('=');
      return [k!, v ?? 'true'] as const;
    }),
);
const intFlag = (name: string, fallback: number): number => (flags.has(name) ? Number(flags.get(name)) : fallback);

/** Resolves when a line equal to `cue` arrives on stdin (each line is one cue, used once). */
const waitForCue = (cue: string): Promise<string> => nextLine((line) => line === cue);

async function appendMode(): Promise<void> {
  const sessions = positional[0]!.split(',');
  const max = intFlag('batches', Infinity);
  const store = lmdbStore({ path: path!, ...bootOption });
  await Promise.all(
    sessions.map(async (s) => {
      const { writerEpoch, lastSeq } = await store.attachWriter(s);
      say(`ATTACHED ${s} ${writerEpoch} ${lastSeq}`);
      let next = lastSeq + 1;
      for (let n = 1; n <= max; n++) {
        const size = randomBatchSize();
        const id = batchIdOf(writerEpoch, n);
        const stored = await store.append(s, writerEpoch, next, batchDrafts(s, id, next, size));
        say(`ACK ${s} ${stored[0]!.seq} ${stored[stored.length - 1]!.seq} ${id}`);
        next += size;
      }
    }),
  );
  await store.close();
  say('DONE');
}

/** Appends one batch of 2; a writer that expected to be fenced reports `LEAKED` if it was not. */
async function tryAppend(
  store: ReturnType<typeof lmdbStore>,
  s: string,
  epoch: number,
  seq: number,
  id: string,
  expectFenced: boolean,
): Promise<void> {
  try {
    const stored = await store.append(s, epoch, seq, batchDrafts(s, id, seq, 2));
    say(`ACK ${s} ${stored[0]!.seq} ${stored[stored.length - 1]!.seq} ${id}`);
    if (expectFenced) say('LEAKED');
  } catch (e) {
    if (!(e instanceof Error)) throw e;
    say(`REFUSED ${e.name} ${isStaleWriterError(e) ? e.currentEpoch : '-'}`);
  }
}

async function fenceAMode(): Promise<void> {
  const s = positional[0]!;
  const store = lmdbStore({ path: path!, ...bootOption });
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
  say('PAUSE_OK');
  await waitForCue('GO');
  // A stale writer that does not know it was fenced: first at its own tail …
  await tryAppend(store, s, writerEpoch, next, batchIdOf(writerEpoch, before + 1), true);
  // … then one that re-read the tail (but not the epoch): the epoch check must still refuse it.
  const head = await store.getHead(s);
  await tryAppend(store, s, writerEpoch, head!.lastSeq + 1, batchIdOf(writerEpoch, before + 2), true);
  await store.close();
  say('DONE');
}

async function raceMode(): Promise<void> {
  const s = positional[0]!;
  const store = lmdbStore({ path: path!, ...bootOption });
  say('OPEN');
  for (let round = 1; round <= intFlag('rounds', 1); round++) {
    await waitForCue('GO');
    let last = { writerEpoch: 0, lastSeq: 0 };
    for (let i = 0; i < intFlag('attaches', 1); i++) {
      last = await store.attachWriter(s);
      say(`ATTACHED ${s} ${last.writerEpoch} ${last.lastSeq}`);
    }
    say('ATTACH_DONE');
    await waitForCue('GO2');
    const head = await store.getHead(s);
    await tryAppend(store, s, last.writerEpoch, head!.lastSeq + 1, batchIdOf(last.writerEpoch, 1), false);
    say('ROUND_DONE');
  }
  await store.close();
  say('DONE');
}

async function straceMode(): Promise<void> {
  const n = Number(positional[0]);
  const durability = flags.get('durability') === 'committed' ? 'committed' : 'flushed';
  const ackEarly = flags.has('ack-early');
  const store = lmdbStore({ path: path!, durability });
  const s = 'traced';
  const { writerEpoch, lastSeq } = await store.attachWriter(s);
  let next = lastSeq + 1;
  for (let i = 1; i <= n; i++) {
    say(`BEGIN ${i}`);
    const p = store.append(s, writerEpoch, next, batchDrafts(s, batchIdOf(writerEpoch, i), next, 2));
    if (ackEarly) say(`ACK ${i}`);
    await p;
    if (!ackEarly) say(`ACK ${i}`);
    next += 2;
  }
  await store.close();
  say('DONE');
}

async function straceNoSyncMode(): Promise<void> {
  const n = Number(positional[0]);
  const env = open({ path: path!, noSync: true });
  mkdirSync(join(path!, 'journal'), { recursive: true });
  const fd = openSync(join(path!, 'journal', '0000000001.wal'), 'w');
  for (let i = 1; i <= n; i++) {
    say(`BEGIN ${i}`);
    await env.put(`k${i}`, `value ${i}`);
    writeSync(fd, `value ${i}\n`);
    say(`ACK ${i}`);
  }
  closeSync(fd);
  await env.close();
  say('DONE');
}

/** ACTORLOOP_TEST_BOOT_ID (set by a test) stands for the machine's boot id: a simulated restart. */
const bootOption = process.env.ACTORLOOP_TEST_BOOT_ID ? { bootId: process.env.ACTORLOOP_TEST_BOOT_ID } : {};

async function holdRecoveryMode(): Promise<void> {
  const env = open({ path: join(path!, 'recovery'), maxDbs: 1, noSync: true });
  env.transactionSync(() => {
    say('LOCKED');
    for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
  });
}

const modes: Record<string, () => Promise<void>> = {
  append: appendMode,
  'fence-a': fenceAMode,
  race: raceMode,
  strace: straceMode,
  'strace-nosync': straceNoSyncMode,
  'hold-recovery': holdRecoveryMode,
};

const run = modes[mode ?? ''];
if (!run || !path) {
  say(`ERROR Usage unknown mode ${String(mode)} or missing path`);
  process.exit(2);
}
async function main(mode: () => Promise<void>): Promise<void> {
  if (flags.has('wait-go')) {
    // Pre-spawned by the parent: the imports are done; the store is opened only on cue.
    say('READY');
    await waitForCue('GO');
  }
  await mode();
}

main(run).then(
  () => process.exit(0),
  (e: unknown) => {
    const err = e instanceof Error ? e : new Error(String(e));
    say(`ERROR ${err.name} ${err.message.replace(/\n/g, ' ')}`);
    process.exit(1);
  },
);
