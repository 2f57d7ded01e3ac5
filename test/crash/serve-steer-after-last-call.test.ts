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

// No accepted input waits for an unrelated later input (docs/guarantees.md, submitInput): a steer
// submitted while a served run's last model call is in flight is accepted for that run, which
// then ends without another model call; the steer starts a run of its own, and the worker
// consumes it and releases the session with nothing else submitted.

const CHILD = join(REPO_ROOT, 'test/crash/serve-child.ts');

afterEach(async () => {
  await killAllChildren();
});

async function steerIntoLastCall(spec: string): Promise<void> {
  const latency = scaled(1500);
  const worker = spawnTs(
    CHILD,
    ['worker', spec, '--lease-ms=5000', '--concurrency=4', `--latency=${latency}`, '--tool-ms=0', '--poll-ms=100', '--steps=1'],
    { label: 'worker' },
  );
  const store = openStore(spec);
  const runtime = createRuntime({ store, ...serveAgent({ steps: 1, latencyMs: 0, toolMs: 0 }) });
  try {
    await worker.waitFor((l) => l === 'READY', 60_000, 'READY');
    await runtime.submit('s0', { kind: 'input', inputId: 'in0', mode: 'follow_up', message: 'pay' });
    // step 2's model call is the run's last (one tool round, then the answer); it starts as step
    // 1's results commit lands, and commits nothing before its answer
    const log = async (): Promise<EventRecord[]> => collect(store.readEvents('s0'));
    await until(async () => (await log()).filter((e) => e.type === 'tool/result').length === 2, 60_000, 'the last model call to start', 25);
    await runtime.submit('s0', { kind: 'input', inputId: 'steer1', mode: 'steer', message: 'and send a receipt' });
    // nothing else is submitted: the worker settles both runs and applies the inbox by itself
    await until(
      async () => (await store.getHead('s0'))?.lastSettledRun?.runId === 'steer1' && (await store.work!.pending('s0')).length === 0,
      30_000,
      "the steer's run to settle (no accepted input waits for a later one)",
      25,
    );
    const events = await log();
    const accepted = events.find((e) => e.type === 'input/accepted' && e.payload.inputId === 'steer1')!;
    const firstEnd = events.find((e) => e.type === 'run/end' && e.payload.runId === 'in0')!;
    expect(accepted.payload.mode, 'the steer was accepted for the running run').toBe('steer');
    expect(accepted.seq).toBeLessThan(firstEnd.seq);
    expect(events.filter((e) => e.type === 'assistant/message' && e.turn === firstEnd.turn)).toHaveLength(2); // no third call in that run
    expect(events.find((e) => e.type === 'run/end' && e.payload.runId === 'steer1')?.payload.status).toBe('succeeded');
    expect((await store.getHead('s0'))!.pendingInputs).toEqual([]);
    await worker.waitFor((l) => l === 'EV released s0', 60_000, 'the session to be released');
  } finally {
    await runtime.close();
  }
}

const pgDb = await postgresForTests('serve: a steer after the last model call starts its own run (PostgreSQL)');

describe('serve: a steer accepted during the last model call starts a run of its own', () => {
  if (pgDb) {
    it(
      'PostgreSQL: the steer is consumed and the session released with nothing else submitted',
      async () => {
        const spec = `pg:${pgDb.url}#${freshSchema('steer')}`;
        const ready = openStore(spec);
        await (ready as EventStore & { ready(): Promise<void> }).ready();
        await ready.close();
        await steerIntoLastCall(spec);
      },
      scaled(180_000),
    );
  }

  it(
    'LMDB: the steer is consumed and the session released with nothing else submitted',
    async () => {
      const dir = tempDir();
      try {
        await steerIntoLastCall(`lmdb:${join(dir.path, 'store')}`);
      } finally {
        await dir.cleanup();
      }
    },
    scaled(180_000),
  );
});
