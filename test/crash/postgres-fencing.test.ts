import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { collect } from '../helpers/drafts.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import {
  checkBatchLog,
  crashRounds,
  killAllChildren,
  parseAck,
  parseAttached,
  REPO_ROOT,
  sleep,
  spawnTs,
  type Ack,
  type ChildRun,
} from './child-util.js';

/**
 * Fencing across processes on PostgreSQL. Writer A is frozen with SIGSTOP — between two appends,
 * or inside an append transaction (after its writes, before COMMIT, holding its session row);
 * writer B, another process, attaches the same session and appends. Inside a transaction, the
 * server's idle_in_transaction_session_timeout aborts A's transaction so B's attach proceeds. A is
 * resumed: every append it tries is refused (StaleWriterError, or a typed store error for the one
 * it was inside) and nothing of A's lands after B attached.
 */
const ROUNDS = crashRounds(2);
const CHILD = join(REPO_ROOT, 'test/crash/pg-store-child.ts');
const HAS_PROC = existsSync('/proc/self/stat');

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
  throw new Error(`process ${pid} did not stop`);
}

const db = await postgresForTests('PostgreSQL store fencing with a SIGSTOPped writer');
if (db) {
  describe('PostgreSQL store fencing with a SIGSTOPped writer', () => {
    afterEach(killAllChildren);

    for (const pause of ['between', 'inside'] as const) {
      it(`refuses a writer frozen ${pause === 'between' ? 'between appends' : 'inside an append transaction'} after another process took over (${ROUNDS} rounds)`, async () => {
        const schema = freshSchema(`fence_${pause}`);
        const session = 'fenced';
        const spawn = (label: string, p: 'between' | 'inside', batches: number): ChildRun =>
          spawnTs(CHILD, ['fence', db.url, schema, session, `--pause=${p}`, `--batches=${batches}`, '--wait-go'], { label });
        const acks: Ack[] = [];
        for (let round = 1; round <= ROUNDS; round++) {
          const a = spawn(`A round ${round}`, pause, 1 + (round % 3));
          const b = spawn(`B round ${round}`, 'between', 2);
          await a.waitFor((l) => l === 'READY', 30_000, 'READY');
          await b.waitFor((l) => l === 'READY', 30_000, 'READY');
          a.send('GO');
          await a.waitFor((l) => l === (pause === 'inside' ? 'IN_TXN' : 'PAUSE_OK'), 30_000, 'A to reach its pause');
          a.signal('SIGSTOP');
          await waitStopped(a.proc.pid!);
          const aAttached = a.lines.map(parseAttached).find(Boolean)!;
          const aAcks = a.lines.map(parseAck).filter((x): x is Ack => x !== undefined);

          const t0 = Date.now();
          b.send('GO');
          await b.waitFor((l) => l === 'PAUSE_OK', 30_000, 'B to attach and append while A is frozen');
          const takeoverMs = Date.now() - t0;
          expect(procState(a.proc.pid!), 'A stayed frozen during the takeover').toBe('T');
          const bAttached = b.lines.map(parseAttached).find(Boolean)!;
          const bAcks = b.lines.map(parseAck).filter((x): x is Ack => x !== undefined);
          expect(bAttached.writerEpoch).toBe(aAttached.writerEpoch + 1);
          expect(bAttached.lastSeq, 'B attached at the tail A acknowledged').toBe(aAcks.at(-1)!.lastSeq);

          a.send('GO');
          a.signal('SIGCONT');
          await a.waitFor((l) => l === 'DONE', 60_000, 'A to try its stale appends');
          expect((await a.waitExit(10_000)).code, a.describe()).toBe(0);
          const after = a.lines.slice(a.lines.indexOf(pause === 'inside' ? 'IN_TXN' : 'PAUSE_OK') + 1);
          const stale = `REFUSED StaleWriterError ${bAttached.writerEpoch}`;
          if (pause === 'inside') {
            expect([stale, 'REFUSED StoreUnavailableError -'], a.describe()).toContain(after[0]);
            expect(after.slice(1), a.describe()).toEqual([stale, stale, 'DONE']);
          } else {
            expect(after, a.describe()).toEqual([stale, stale, 'DONE']);
          }
          b.signal('SIGKILL');
          await b.exited;

          acks.push(...aAcks, ...bAcks);
          const store = postgresStore({ connectionString: db.url, schema });
          try {
            const events = await collect(store.readEvents(session));
            const { problems, lastSeq } = checkBatchLog(session, events, acks);
            expect(problems, `round ${round}`).toEqual([]);
            expect(
              events.filter((e) => e.seq > bAttached.lastSeq && e.writerEpoch !== bAttached.writerEpoch),
              "events after B attached that are not B's",
            ).toEqual([]);
            expect(lastSeq).toBe(bAcks.at(-1)!.lastSeq);
          } finally {
            await store.close();
          }
          console.log(`fencing (${pause}) round ${round}: takeover took ${takeoverMs} ms`);
        }
      });
    }
  });
}
