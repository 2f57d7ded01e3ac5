import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import type { RecoveryOutcome } from '../../src/contracts/requests.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { crashRounds, killAllChildren, sleep, spawnTs, type ChildRun } from './child-util.js';
import { AGENT_CHILD, parseLedger, procState, readText, trialPaths, type FenceJob } from './torture-lib.js';
import { scaled } from '../helpers/load.js';

/**
 * Session-level fencing with real processes (DESIGN §5, issue 5 item 5). Writer A (a child
 * process) runs a run whose exclusive tool writes its effect to the ledger, prints HOLDING and
 * waits — inside the tool, outside any LMDB write transaction. The parent freezes A with SIGSTOP
 * (checked in /proc), then writer B (another process) opens the same session, which fences A, and
 * continues the run to its end. A is resumed with SIGCONT and its tool returns: A must commit
 * nothing more (no event with A's epoch after B's session/attached), run no further tool (the
 * exclusive `after` call — in the same batch, or in the next step — never writes the ledger from
 * A's pid) and report the run `fenced` (`incomplete`, error kind `inconsistent`).
 *
 * Writers form a chain on one LMDB file, a new session per round: writer r+1 is the B of round r
 * and then the A of round r+1. Rounds alternate the hold tool (with reconcile: B reconciles it as
 * done; without: B records it uncertain-hanging) and where `after` is (same batch / next step).
 * ACTORLOOP_CRASH_ROUNDS raises the number of rounds.
 */
const ROUNDS = crashRounds(20);

async function waitStopped(pid: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (procState(pid) === 'T') return;
    await sleep(10);
  }
  throw new Error(`process ${pid} did not stop (state ${procState(pid)})`);
}

const jobA = (r: number): NonNullable<FenceJob['a']> => ({
  session: `f${r}`,
  variant: Math.floor((r - 1) / 2) % 2 === 0 ? 'same-batch' : 'next-step',
  hold: r % 2 === 1 ? 'hold' : 'hold_nr',
});

/** The JSON after `<TAG> <session> ` in the first such line. */
const jsonAfter = <T>(w: ChildRun, tag: string, session: string): T => {
  const prefix = `${tag} ${session} `;
  const line = w.lines.find((l) => l.startsWith(prefix));
  if (!line) throw new Error(`no ${prefix}line from ${w.describe()}`);
  return JSON.parse(line.slice(prefix.length)) as T;
};

describe('session-level fencing across processes (SIGSTOP / SIGCONT)', () => {
  const dir = tempDir('actorloop-agent-fence-');
  afterEach(killAllChildren);
  afterAll(dir.cleanup);

  it(
    `a frozen writer, fenced by another process, commits nothing and runs no further tool (${ROUNDS} rounds)`,
    async () => {
      const paths = trialPaths(dir.path);
      const writers: ChildRun[] = [];
      // Writers are spawned two ahead: they load (about a second of CPU) while earlier ones run.
      const writer = (k: number): ChildRun => {
        while (writers.length < Math.min(k + 2, ROUNDS + 1))
          writers.push(spawnTs(AGENT_CHILD, ['fence', '--wait-go'], { label: `fence writer ${writers.length + 1}` }));
        return writers[k - 1]!;
      };
      const go = async (w: ChildRun, job: FenceJob) => {
        await w.waitFor((l) => l === 'READY', 60_000, 'READY');
        w.send(`GO ${JSON.stringify(job)}`);
      };

      let a = writer(1);
      await go(a, { path: dir.path, a: jobA(1) });
      for (let r = 1; r <= ROUNDS; r++) {
        const job = jobA(r);
        const s = job.session;
        const what = `round ${r} (${job.variant}, ${job.hold})`;
        const holding = await a.waitFor((l) => l.startsWith(`HOLDING ${s} `), 30_000, `A to hold in ${s}`);
        const holdKey = holding.split(' ')[2]!;
        const aPid = a.proc.pid!;
        const aEpoch = Number(a.lines.find((l) => l.startsWith(`A_ATTACHED ${s} `))!.split(' ')[2]);
        a.signal('SIGSTOP');
        await waitStopped(aPid);

        const b = writer(r + 1);
        await go(b, { path: dir.path, b: s, ...(r < ROUNDS ? { a: jobA(r + 1) } : {}) });
        await b.waitFor((l) => l.startsWith(`B_DONE ${s} `), 30_000, `B to take ${s} over and finish its run`);
        expect(procState(aPid), `${what}: A stayed frozen during the takeover`).toBe('T');
        const rec = jsonAfter<RecoveryOutcome>(b, 'B_ATTACHED', s);
        expect(rec.writerEpoch, what).toBe(aEpoch + 1);
        expect(
          rec.interruptedRuns.map((x) => x.runId),
          what,
        ).toEqual(['run-1']);
        const holdResolution = job.hold === 'hold' ? 'reconcile' : 'uncertain-hanging';
        expect(
          rec.uncertainToolCalls.map((c) => [c.name, c.resolution]),
          what,
        ).toEqual(
          job.variant === 'same-batch'
            ? [
                [job.hold, holdResolution],
                ['after', 'reconcile'],
              ]
            : [[job.hold, holdResolution]],
        );
        expect(jsonAfter(b, 'B_DONE', s), `${what}: ${b.describe()}`).toMatchObject({ status: 'succeeded', outcome: 'completed' });

        a.send('RELEASE'); // buffered in the pipe until A runs again
        a.signal('SIGCONT');
        await a.waitFor((l) => l.startsWith(`A_RESULT ${s} `), 30_000, `A's result in ${s}`);
        expect((await a.waitExit(15_000)).code, a.describe()).toBe(0);
        expect(jsonAfter(a, 'A_RESULT', s), `${what}: ${a.describe()}`).toMatchObject({
          outcome: 'incomplete',
          status: 'fenced',
          checkpointCommitted: false,
          error: { kind: 'inconsistent' },
        });
        const afterRelease = a.lines.slice(a.lines.indexOf(`RELEASED ${s}`) + 1);
        expect(
          afterRelease.filter((l) => l.startsWith('TOOL ') || l.startsWith('ACK ')),
          `${what}: A after SIGCONT ran a tool or committed`,
        ).toEqual([]);

        // The log: nothing of A's after B attached; the run settled by B.
        const store = lmdbStore({ path: paths.db });
        let events: EventRecord[];
        try {
          events = await collect(store.readEvents(s));
        } finally {
          await store.close();
        }
        events.forEach((e, i) => expect(e.seq, `${s}: seq contiguous`).toBe(i + 1));
        const bAttached = events.find((e) => e.type === 'session/attached' && e.writerEpoch === aEpoch + 1);
        expect(bAttached, `${what}: B's session/attached`).toBeDefined();
        const late = events.filter((e) => e.seq > bAttached!.seq && e.writerEpoch !== aEpoch + 1);
        expect(
          late.map((e) => `${e.seq} ${e.type} epoch ${e.writerEpoch}`),
          `${what}: events after B attached that are not B's`,
        ).toEqual([]);
        const ends = events.filter((e) => e.type === 'run/end');
        expect(
          ends.map((e) => [e.writerEpoch, e.payload.status]),
          what,
        ).toEqual([[aEpoch + 1, 'succeeded']]);
        const results = new Map(
          events
            .filter((e) => e.type === 'tool/result')
            .map((e) => [String(e.payload.callId), e.payload.outcome as { kind: string; content?: string }]),
        );
        const calls = events
          .filter((e) => e.type === 'tool/call')
          .map((e) => ({ name: String(e.payload.name), key: String(e.payload.idempotencyKey), callId: String(e.payload.callId) }));
        expect(
          calls.map((c) => c.name),
          what,
        ).toEqual([job.hold, 'after']);
        const holdCall = calls[0]!;
        const afterCall = calls[1]!;
        expect(holdCall.key).toBe(holdKey);
        expect(results.get(holdCall.callId), what).toMatchObject(
          job.hold === 'hold' ? { kind: 'completed', content: `reconciled: ${holdKey} is in the ledger` } : { kind: 'uncertain-hanging' },
        );

        // The ledger: the held effect once (A's); `after` never from A — never at all when its intent
        // was A's (B cannot know it never started: uncertain), once from B when B's model asked for it.
        const ledger = parseLedger(readText(paths.ledger));
        expect(ledger.malformed).toEqual([]);
        const mine = ledger.entries.filter((e) => e.key.startsWith(`${s}/`));
        expect(
          mine.filter((e) => e.key === holdKey).map((e) => e.pid),
          `${what}: the held effect`,
        ).toEqual([aPid]);
        expect(
          mine.filter((e) => e.pid === aPid).map((e) => e.key),
          `${what}: A's effects`,
        ).toEqual([holdKey]);
        const afterPids = mine.filter((e) => e.key === afterCall.key).map((e) => e.pid);
        if (job.variant === 'same-batch') {
          expect(afterPids, `${what}: after (A's intent, never started)`).toEqual([]);
          expect(results.get(afterCall.callId), what).toMatchObject({ kind: 'uncertain-hanging' });
        } else {
          expect(afterPids, `${what}: after (B's own call)`).toEqual([b.proc.pid]);
          expect(results.get(afterCall.callId), what).toMatchObject({
            kind: 'completed',
            content: `executed: ${afterCall.key} by ${b.proc.pid}`,
          });
        }
        a = b;
      }
      // The last writer only took over: it finishes on its own.
      await a.waitFor((l) => l === 'DONE', 30_000, 'the last writer to finish');
      expect((await a.waitExit(15_000)).code, a.describe()).toBe(0);
    },
    scaled(120_000),
  );
});
