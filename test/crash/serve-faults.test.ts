import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime } from '../../src/runtime/runtime.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { collect } from '../helpers/drafts.js';
import { scaled } from '../helpers/load.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, REPO_ROOT, spawnTs, until, type ChildRun } from './child-util.js';
import { openStore, serveAgent } from './serve-child.js';

// Serving survives losing workers (issue 17): real worker processes share one store and serve
// sessions fed through runtime.submit by another process; one worker is SIGKILLed mid-run and
// (PostgreSQL) another SIGSTOPped past its lease and resumed. Every run settles, every input is
// consumed exactly once, no exclusive tool runs twice unless reported uncertain, and no append
// from a fenced worker lands. FAULT_SERVE_SESSIONS sets the size (the issue's: 300).

const CHILD = join(REPO_ROOT, 'test/crash/serve-child.ts');
const SETTLED = new Set(['succeeded', 'failed', 'cancelled', 'stopped', 'budget_exhausted', 'blocked', 'delivery_unknown']);

afterEach(async () => {
  await killAllChildren();
});

interface Fleet {
  workers: ChildRun[];
  feeder: ChildRun;
}

function spawnWorkers(store: string, n: number, ledger: string, leaseMs: number): ChildRun[] {
  return Array.from({ length: n }, (_, i) =>
    spawnTs(
      CHILD,
      [
        'worker',
        store,
        `--ledger=${ledger}`,
        `--lease-ms=${leaseMs}`,
        '--concurrency=24',
        '--latency=5',
        '--tool-ms=40',
        '--poll-ms=100',
        '--steps=2',
      ],
      { label: `worker ${i + 1}` },
    ),
  );
}

const count = (run: ChildRun, type: string) => run.lines.filter((l) => l.startsWith(`EV ${type} `)).length;

/** SIGKILLs `w` while one of its `charge` calls has started and not ended (its ledger says so). */
async function killMidCharge(w: ChildRun, ledger: string): Promise<void> {
  const file = join(ledger, `${w.proc.pid}.txt`);
  const deadline = Date.now() + scaled(60_000);
  for (;;) {
    const open = new Set<string>();
    for (const line of existsSync(file) ? readFileSync(file, 'utf8').split('\n') : []) {
      const [what, , key] = line.split(' ');
      if (what === 'START') open.add(key!);
      else if (what === 'END') open.delete(key!);
    }
    if (open.size > 0 || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 2));
  }
  w.signal('SIGKILL');
}

/** Every check of the issue, on the store the fleet served. */
async function checkOutcome(
  store: EventStore,
  sessions: number,
  ledger: string,
): Promise<{ runs: number; succeeded: number; uncertain: number; epochs: number; twice: number }> {
  const runtime = createRuntime({ store, ...serveAgent({ steps: 2, latencyMs: 0, toolMs: 0 }) });
  let runs = 0;
  let succeeded = 0;
  let uncertain = 0;
  let epochs = 0;
  let twice = 0;
  const starts = new Map<string, number>();
  for (const f of existsSync(ledger) ? readdirSync(ledger) : []) {
    for (const line of readFileSync(join(ledger, f), 'utf8').split('\n')) {
      const m = /^START (\S+) (\S+) /.exec(line);
      if (m) starts.set(m[2]!, (starts.get(m[2]!) ?? 0) + 1);
    }
  }
  try {
    for (let i = 0; i < sessions; i++) {
      const sid = `s${i}`;
      const log: EventRecord[] = await collect(store.readEvents(sid));
      // no append from a fenced worker lands: epochs never go back, each begins with its attach
      let epoch = 0;
      for (const e of log) {
        if (e.writerEpoch < epoch) throw new Error(`${sid} seq ${e.seq}: an append of epoch ${e.writerEpoch} landed after epoch ${epoch}`);
        if (e.writerEpoch > epoch) {
          expect(e.type, `${sid} seq ${e.seq}: epoch ${e.writerEpoch} starts with its attach`).toBe('session/attached');
          epoch = e.writerEpoch;
          epochs++;
        }
      }
      for (const k of [0, 1]) {
        const inputId = `${sid}-in${k}`;
        // every input consumed exactly once: accepted once, one run opened for it, settled once
        expect(
          log.filter((e) => e.type === 'input/accepted' && e.payload.inputId === inputId),
          `${inputId} accepted once`,
        ).toHaveLength(1);
        expect(
          log.filter((e) => e.type === 'run/start' && e.payload.runId === inputId && e.payload.runEpoch === 1),
          `${inputId} run opened once`,
        ).toHaveLength(1);
        const ends = log.filter((e) => e.type === 'run/end' && e.payload.runId === inputId && SETTLED.has(String(e.payload.status)));
        expect(ends, `${inputId} settled once`).toHaveLength(1);
        const result = await runtime.waitForResult(sid, inputId, { signal: AbortSignal.timeout(5000) });
        expect(SETTLED.has(result.status), `${inputId}: ${result.status}`).toBe(true);
        runs++;
        if (result.status === 'succeeded') succeeded++;
      }
      // no exclusive tool runs twice without being reported uncertain
      const uncertainKeys = new Set<string>();
      const keyOfCall = new Map<string, string>();
      for (const e of log) {
        if (e.type === 'tool/call' && e.payload.name === 'charge')
          keyOfCall.set(String(e.payload.callId), String(e.payload.idempotencyKey));
        if (e.type === 'tool/result' && String((e.payload.outcome as { kind: string }).kind).startsWith('uncertain')) {
          const key = keyOfCall.get(String(e.payload.callId));
          if (key) uncertainKeys.add(key);
          uncertain++;
        }
      }
      for (const key of keyOfCall.values()) {
        const n = starts.get(key) ?? 0;
        if (n > 1) {
          twice++;
          expect(uncertainKeys.has(key), `${sid}: charge ${key} ran ${n} times and is not reported uncertain`).toBe(true);
        }
      }
      expect(await store.work!.pending(sid), `${sid}: inbox applied`).toEqual([]);
    }
  } finally {
    await runtime.close();
  }
  return { runs, succeeded, uncertain, epochs, twice };
}

async function feedAndWait(fleet: Fleet, sessions: number, faults: () => Promise<void>): Promise<void> {
  await Promise.all([...fleet.workers, fleet.feeder].map((c) => c.waitFor((l) => l === 'READY', 60_000, 'READY')));
  await fleet.feeder.waitFor((l) => l === 'FED 0', 120_000, 'the first wave');
  await faults();
  fleet.feeder.send('WAVE');
  await fleet.feeder.waitFor((l) => l === 'FED 1', 120_000, 'the second wave');
  void sessions;
}

async function settledCount(store: EventStore, sessions: number): Promise<number> {
  let n = 0;
  for (let i = 0; i < sessions; i++) {
    const head = await store.getHead(`s${i}`);
    if (!head || head.openRun) continue;
    const last = head.lastSettledRun?.runId;
    if (last === `s${i}-in1` && (await store.work!.pending(`s${i}`)).length === 0) n++;
  }
  return n;
}

const pgDb = await postgresForTests('serve faults: PostgreSQL');

describe('serve faults', () => {
  if (pgDb) {
    it('PostgreSQL: 3 workers, one SIGKILLed mid-run, one SIGSTOPped past its lease: every run settles once, nothing runs twice unreported, no fenced append lands', async () => {
      const sessions = Number(process.env.FAULT_SERVE_SESSIONS ?? 60);
      const spec = `pg:${pgDb.url}#${freshSchema('serve')}`;
      const dir = tempDir();
      const ledger = join(dir.path, 'ledger');
      const leaseMs = scaled(1500);
      try {
        const store = openStore(spec);
        await (store as EventStore & { ready(): Promise<void> }).ready(); // migrations once, before the children race for them
        const fleet: Fleet = {
          workers: spawnWorkers(spec, 3, ledger, leaseMs),
          feeder: spawnTs(CHILD, ['feed', spec, `--sessions=${sessions}`], { label: 'feeder' }),
        };
        const [w1, w2, w3] = fleet.workers as [ChildRun, ChildRun, ChildRun];
        let heldByW2 = 0;
        await feedAndWait(fleet, sessions, async () => {
          // mid-run: once the workers have attached sessions and charges are running
          await until(() => count(w1, 'attached') >= 3 && count(w2, 'attached') >= 3, 60_000, 'workers 1 and 2 to attach sessions');
          await killMidCharge(w1, ledger);
          heldByW2 = count(w2, 'attached') - count(w2, 'released') - count(w2, 'lease_lost');
          w2.signal('SIGSTOP');
          await new Promise((r) => setTimeout(r, leaseMs * 2 + 500));
          w2.signal('SIGCONT');
        });
        await until(async () => (await settledCount(store, sessions)) === sessions, 240_000, 'every session to settle both runs');
        w2.signal('SIGTERM');
        w3.signal('SIGTERM');
        expect((await w2.waitExit(60_000)).code).toBe(0);
        expect((await w3.waitExit(60_000)).code).toBe(0);
        fleet.feeder.send('EXIT');
        await fleet.feeder.waitExit(30_000);
        // the paused worker found out: it lost leases (or was fenced) when it resumed
        if (heldByW2 > 0) expect(count(w2, 'lease_lost') + count(w2, 'fenced')).toBeGreaterThan(0);
        // the killed worker's sessions were taken over by the others
        expect(await store.work!.listLeases().then((l) => l.filter((x) => x.workerId !== null && !x.expired))).toEqual([]);
        const out = await checkOutcome(store, sessions, ledger); // (closes the store)
        expect(out.runs).toBe(sessions * 2);
        expect(out.uncertain).toBeGreaterThan(0); // the charge the SIGKILL interrupted
        expect(out.twice).toBe(0); // an interrupted charge is recorded uncertain, never run again
        console.log(
          `serve faults (PostgreSQL, ${sessions} sessions): ${out.runs} runs settled (${out.succeeded} succeeded), ${out.uncertain} uncertain tool results, ${out.epochs} writer epochs; worker 2 held ${heldByW2} at SIGSTOP, lost ${count(w2, 'lease_lost')}, fenced ${count(w2, 'fenced')}; takeovers: ${count(w3, 'claimed')} claims by worker 3`,
        );
      } finally {
        await dir.cleanup();
      }
    }, 600_000);
  }

  it('LMDB: 2 worker processes on one file, one SIGKILLed mid-run: every run settles once, nothing runs twice unreported, no fenced append lands', async () => {
    const sessions = Number(process.env.FAULT_SERVE_LMDB_SESSIONS ?? 30);
    const dir = tempDir();
    const spec = `lmdb:${join(dir.path, 'store')}`;
    const ledger = join(dir.path, 'ledger');
    const leaseMs = scaled(1500);
    try {
      const fleet: Fleet = {
        workers: spawnWorkers(spec, 2, ledger, leaseMs),
        feeder: spawnTs(CHILD, ['feed', spec, `--sessions=${sessions}`], { label: 'feeder' }),
      };
      const [w1, w2] = fleet.workers as [ChildRun, ChildRun];
      await feedAndWait(fleet, sessions, async () => {
        await until(() => count(w1, 'attached') >= 3, 60_000, 'worker 1 to attach sessions');
        await killMidCharge(w1, ledger);
      });
      const store = openStore(spec);
      await until(async () => (await settledCount(store, sessions)) === sessions, 240_000, 'every session to settle both runs');
      w2.signal('SIGTERM');
      expect((await w2.waitExit(60_000)).code).toBe(0);
      fleet.feeder.send('EXIT');
      await fleet.feeder.waitExit(30_000);
      const out = await checkOutcome(store, sessions, ledger); // (closes the store)
      expect(out.runs).toBe(sessions * 2);
      expect(out.uncertain).toBeGreaterThan(0);
      expect(out.twice).toBe(0);
      expect(count(w2, 'claimed')).toBeGreaterThan(0);
      console.log(
        `serve faults (LMDB, ${sessions} sessions): ${out.runs} runs settled (${out.succeeded} succeeded), ${out.uncertain} uncertain tool results, ${out.epochs} writer epochs`,
      );
    } finally {
      await dir.cleanup();
    }
  }, 600_000);
});
