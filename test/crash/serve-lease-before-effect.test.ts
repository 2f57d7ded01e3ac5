import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { createRuntime } from '../../src/runtime/runtime.js';
import { collect } from '../helpers/drafts.js';
import { scaled } from '../helpers/load.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, REPO_ROOT, spawnTs, until } from './child-util.js';
import { openStore, serveAgent } from './serve-child.js';

// A serving worker starts a side effect only while it holds the session's lease, checked after
// the last await before the effect (docs/scale-out.md). Worker A commits a `charge` intent, then
// its fence read stalls (a store wrapper, as an app could write one) past its lease; worker B
// takes the session over and records the charge uncertain-hanging. When A wakes it must not run
// the charge: a side effect twice with nothing reported.

const CHILD = join(REPO_ROOT, 'test/crash/serve-child.ts');

afterEach(async () => {
  await killAllChildren();
});

const ledgerStarts = (ledger: string): string[] =>
  (existsSync(ledger) ? readdirSync(ledger) : []).flatMap((f) =>
    readFileSync(join(ledger, f), 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('START ')),
  );

async function pausedWorkerRunsNoCharge(spec: string, ledger: string): Promise<void> {
  const leaseMs = scaled(1000);
  const worker = (label: string, extra: string[]) =>
    spawnTs(
      CHILD,
      [
        'worker',
        spec,
        `--ledger=${ledger}`,
        `--lease-ms=${leaseMs}`,
        '--concurrency=4',
        '--latency=0',
        '--tool-ms=0',
        '--poll-ms=100',
        '--steps=1',
        ...extra,
      ],
      { label },
    );
  const store = openStore(spec);
  const runtime = createRuntime({ store, ...serveAgent({ steps: 1, latencyMs: 0, toolMs: 0 }) });
  try {
    const a = worker('worker A', [`--stall-after-intent-ms=${leaseMs * 4}`]);
    await a.waitFor((l) => l === 'READY', 60_000, 'READY');
    await runtime.submit('s0', { kind: 'input', inputId: 'in0', mode: 'follow_up', message: 'pay' });
    await a.waitFor((l) => l === 'STALLED s0', 60_000, 'worker A to stall after its fence read');
    const b = worker('worker B', []);
    await b.waitFor((l) => l === 'READY', 60_000, 'READY');
    // B takes the session over once A's lease expired, and settles the run
    await until(async () => (await store.getHead('s0'))?.lastSettledRun?.runId === 'in0', 60_000, 'the run to settle under worker B');
    // A wakes up (its stall ends) and finds its lease lost
    await a.waitFor((l) => l.startsWith('EV lease_lost s0'), 60_000, 'worker A to report its lease lost');
    await new Promise((r) => setTimeout(r, 300)); // anything A would still start, it starts now
    const log: EventRecord[] = await collect(store.readEvents('s0'));
    const charge = log.find((e) => e.type === 'tool/call' && e.payload.name === 'charge')!;
    const result = log.find((e) => e.type === 'tool/result' && e.payload.callId === charge.payload.callId)!;
    expect((result.payload.outcome as { kind: string }).kind).toBe('uncertain-hanging');
    expect(result.writerEpoch).toBeGreaterThan(charge.writerEpoch);
    expect(ledgerStarts(ledger), 'the charge recorded uncertain was started by no worker').toEqual([]);
  } finally {
    await runtime.close();
  }
}

const pgDb = await postgresForTests('serve: a worker that lost its lease starts no side effect (PostgreSQL)');

describe('serve: a worker that lost its lease starts no side effect', () => {
  if (pgDb) {
    it('PostgreSQL: a worker paused after its fence read, past its lease, runs no exclusive tool when it wakes', async () => {
      const spec = `pg:${pgDb.url}#${freshSchema('lease')}`;
      const ready = openStore(spec);
      await (ready as EventStore & { ready(): Promise<void> }).ready(); // migrations once, before the children
      await ready.close();
      const dir = tempDir();
      try {
        await pausedWorkerRunsNoCharge(spec, join(dir.path, 'ledger'));
      } finally {
        await dir.cleanup();
      }
    }, 180_000);
  }

  it('LMDB: a worker paused after its fence read, past its lease, runs no exclusive tool when it wakes', async () => {
    const dir = tempDir();
    try {
      await pausedWorkerRunsNoCharge(`lmdb:${join(dir.path, 'store')}`, join(dir.path, 'ledger'));
    } finally {
      await dir.cleanup();
    }
  }, 180_000);
});
