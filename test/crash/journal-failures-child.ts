/**
 * Child program for test/persistence/journal-failures.test.ts: a real second process.
 *
 *   node --import tsx test/crash/journal-failures-child.ts <mode> <path> ...
 *
 * - `append <path> <session> <bootId> <flushed|committed>`: opens the store, attaches a writer,
 *   appends one batch of 2 at the tail, prints `ACK <session> <first> <last> <batchId>`, closes.
 * - `eio-append <path> <bootId>`: patches fs.fdatasyncSync so that the flush of the second
 *   append's journal frame fails with EIO (the frame's bytes were written: a transient EIO, or a
 *   flush that fails after the kernel took the write). Attaches `s`, appends `ok-1` (printing
 *   `ACK`), then appends `failed-2` and prints `REJECTED <error name> <cause's code>` (or `ACKED` if it resolved), closes.
 */
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { batchDrafts, batchIdOf, say } from './child-util.js';

const [mode, path, ...rest] = process.argv.slice(2);

async function appendMode(): Promise<void> {
  const [session, bootId, durability] = rest as [string, string, 'flushed' | 'committed'];
  const { lmdbStore } = await import('../../src/persistence/lmdb-store.js');
  const store = lmdbStore({ path: path!, bootId, durability });
  const { writerEpoch, lastSeq } = await store.attachWriter(session);
  const id = batchIdOf(writerEpoch, 1);
  const stored = await store.append(session, writerEpoch, lastSeq + 1, batchDrafts(session, id, lastSeq + 1, 2));
  say(`ACK ${session} ${stored[0]!.seq} ${stored[stored.length - 1]!.seq} ${id}`);
  await store.close();
}

async function eioAppendMode(): Promise<void> {
  const [bootId] = rest as [string];
  let failNext = false;
  const real = fs.fdatasyncSync;
  fs.fdatasyncSync = (fd: number) => {
    if (failNext) {
      failNext = false;
      throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO', errno: -5, syscall: 'fdatasync' });
    }
    real(fd);
  };
  syncBuiltinESMExports();
  const { lmdbStore } = await import('../../src/persistence/lmdb-store.js');
  const store = lmdbStore({ path: path!, bootId });
  const { writerEpoch } = await store.attachWriter('s');
  const draft = (eventId: string) => ({
    eventId,
    type: 'step/start' as const,
    turn: 1,
    step: 1,
    attempt: 1,
    surfaceOp: 'none' as const,
    payload: {},
  });
  await store.append('s', writerEpoch, 1, [draft('ok-1')]);
  say('ACK s 1 1 ok-1');
  failNext = true; // the next fdatasync is the flush of the next commit's frame
  try {
    await store.append('s', writerEpoch, 2, [draft('failed-2')]);
    say('ACKED');
  } catch (e) {
    say(`REJECTED ${(e as Error).name} ${String(((e as Error).cause as NodeJS.ErrnoException | undefined)?.code)}`);
  }
  await store.close();
}

const modes: Record<string, () => Promise<void>> = { append: appendMode, 'eio-append': eioAppendMode };
const run = modes[mode ?? ''];
if (!run || !path) {
  say(`ERROR Usage unknown mode ${String(mode)} or missing path`);
  process.exit(2);
}
run().then(
  () => process.exit(0),
  (e: unknown) => {
    const err = e instanceof Error ? e : new Error(String(e));
    say(`ERROR ${err.name} ${err.message.replace(/\n/g, ' ')}`);
    process.exit(1);
  },
);
