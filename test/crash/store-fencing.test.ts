import { existsSync, readFileSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import {
  checkBatchLog,
  crashRounds,
  killAllChildren,
  type ChildRun,
  parseAck,
  parseAttached,
  sleep,
  spawnStoreChild,
  type Ack,
} from './child-util.js';

/**
 * Fencing across processes: writer A is frozen with SIGSTOP between two appends (outside any
 * write transaction, at its PAUSE_OK point); writer B, another process, attaches the same session
 * and appends; A is resumed and appends with its old epoch. A must be refused with
 * StaleWriterError — at its own stale tail and at the current tail — and nothing of A's may land
 * after B's attach.
 */
const ROUNDS = crashRounds(5);
const SESSION = 'fenced';
/** A frozen process neither blocks B nor may B take longer than this (a hang fails the test). */
const TAKEOVER_TIMEOUT_MS = 30_000;

const HAS_PROC = existsSync('/proc/self/stat');

/**
 * Process state from /proc (`T` = stopped), to prove A really was frozen during the takeover.
 * Without /proc (not Linux) the check is skipped: SIGSTOP is then trusted.
 */
function procState(pid: number): string {
  if (!HAS_PROC) return 'T';
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

async function waitStopped(pid: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (procState(pid) === 'T') return;
    await sleep(10);
  }
  throw new Error(`process ${pid} did not stop (state ${procState(pid)})`);
}

describe('LMDB store fencing with a SIGSTOPped writer', () => {
  const dir = tempDir('actorloop-fence-');
  afterEach(killAllChildren);
  afterAll(dir.cleanup);

  it(`refuses the frozen writer's appends after another process took over (${ROUNDS} rounds)`, async () => {
    // A chain of writers: writer r is the A of round r and the B of round r - 1 (it, too, stops
    // at PAUSE_OK). Writers are spawned two ahead, so they load while earlier ones run.
    const writers: ChildRun[] = [];
    const spawnWriter = (n: number): ChildRun => {
      while (writers.length < Math.min(n + 2, ROUNDS + 1)) {
        const k = writers.length + 1;
        writers.push(spawnStoreChild('fence-a', [dir.path, SESSION, `--batches=${1 + (k % 3)}`, '--wait-go'], `writer ${k}`));
      }
      return writers[n - 1]!;
    };
    const start = async (w: ChildRun) => {
      await w.waitFor((l) => l === 'READY', 30_000, 'READY');
      w.send('GO');
    };
    const acks: Ack[] = [];
    let a = spawnWriter(1);
    let b = spawnWriter(2);
    await start(a);
    await a.waitFor((l) => l === 'PAUSE_OK', 30_000, 'PAUSE_OK');
    expect(a.lines.map(parseAttached).find(Boolean)!.lastSeq).toBe(0);

    for (let round = 1; round <= ROUNDS; round++) {
      a.signal('SIGSTOP');
      await waitStopped(a.proc.pid!);
      const aAttached = a.lines.map(parseAttached).find(Boolean)!;
      const aAcks = a.lines.map(parseAck).filter((x): x is Ack => x !== undefined);

      await start(b);
      await b.waitFor((l) => l === 'PAUSE_OK', TAKEOVER_TIMEOUT_MS, 'B to attach and append while A is stopped');
      expect(procState(a.proc.pid!), 'A stayed frozen during the takeover').toBe('T');
      const bAttached = b.lines.map(parseAttached).find(Boolean)!;
      const bAcks = b.lines.map(parseAck).filter((x): x is Ack => x !== undefined);
      expect(bAttached.writerEpoch).toBe(aAttached.writerEpoch + 1);
      expect(bAttached.lastSeq, 'B attached at the tail A left').toBe(aAcks.at(-1)!.lastSeq);

      a.send('GO'); // buffered in the pipe until A runs again
      a.signal('SIGCONT');
      await a.waitFor((l) => l === 'DONE', 30_000, 'A to try its stale appends');
      expect((await a.waitExit(10_000)).code, a.describe()).toBe(0);
      const afterPause = a.lines.slice(a.lines.indexOf('PAUSE_OK') + 1);
      expect(afterPause, a.describe()).toEqual([
        `REFUSED StaleWriterError ${bAttached.writerEpoch}`,
        `REFUSED StaleWriterError ${bAttached.writerEpoch}`,
        'DONE',
      ]);

      acks.push(...aAcks);
      const store = lmdbStore({ path: dir.path });
      try {
        const events = await collect(store.readEvents(SESSION));
        const { problems, lastSeq } = checkBatchLog(SESSION, events, [...acks, ...bAcks]);
        expect(problems, `round ${round}`).toEqual([]);
        const afterTakeover = events.filter((e) => e.seq > bAttached.lastSeq);
        expect(
          afterTakeover.filter((e) => e.writerEpoch !== bAttached.writerEpoch),
          "events after B attached that are not B's",
        ).toEqual([]);
        expect(lastSeq, "the log ends with B's last acknowledged batch").toBe(bAcks.at(-1)!.lastSeq);
        expect((await store.getHead(SESSION))!.writerEpoch).toBe(bAttached.writerEpoch);
      } finally {
        await store.close();
      }
      a = b;
      if (round < ROUNDS) b = spawnWriter(round + 2);
    }
    // The last B still waits at PAUSE_OK, and nobody fences it: end it.
    a.signal('SIGKILL');
    await a.exited;
  });
});
