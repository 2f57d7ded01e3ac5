/**
 * Child program of test/crash/agent-tree.test.ts: one life of the agent tree (agent-tree.ts) on an
 * LMDB log, in a real process.
 *
 *   node --import tsx test/crash/agent-tree-child.ts <dir> <killAt>
 *
 * Starts the root run, or continues it when a previous life left it open. `killAt` SIGKILLs the
 * process right after a durable append: `parent-intent` (the root's tool/call), `child-intent`
 * (a child's ledger tool/call), `child-end` (a child's settled run/end), `parent-result` (the
 * root's tool/result), or `none`.
 * Protocol lines: `READY`, `KILL <what>`, `RESULT <json>`, `DONE`, `ERROR <message>`.
 */
import { join } from 'node:path';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { createRuntime } from '../../src/runtime/runtime.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { say } from './child-util.js';
import { agentTree, ROOT, RUN } from './agent-tree.js';

const [dir, killAt] = process.argv.slice(2) as [string, string];

const KILLS: Record<string, (sessionId: string, r: EventRecord) => boolean> = {
  'parent-intent': (id, r) => id === ROOT && r.type === 'tool/call',
  'child-intent': (id, r) => id !== ROOT && r.type === 'tool/call',
  'child-end': (id, r) => id !== ROOT && r.type === 'run/end' && r.payload.status === 'succeeded',
  'parent-result': (id, r) => id === ROOT && r.type === 'tool/result',
};

function killingStore(inner: EventStore, when: ((id: string, r: EventRecord) => boolean) | undefined): EventStore {
  if (!when) return inner;
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'append') {
        return async (...args: Parameters<EventStore['append']>) => {
          const records = await target.append(...args);
          if (records.some((r) => when(args[0], r))) {
            say(`KILL ${killAt}`);
            process.kill(process.pid, 'SIGKILL');
            for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
          }
          return records;
        };
      }
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

async function main(): Promise<void> {
  const store = killingStore(lmdbStore({ path: join(dir, 'db') }), KILLS[killAt]);
  const runtime = createRuntime({ store, ...agentTree(join(dir, 'ledger')) });
  const session = await runtime.openSession(ROOT);
  say('READY');
  const head = await store.getHead(ROOT);
  const r =
    head?.openRun?.runId === RUN
      ? await session.execute({ kind: 'continue', runId: RUN, attemptId: `a${head.writerEpoch}` })
      : head?.lastSettledRun?.runId === RUN
        ? await runtime.waitForResult(ROOT, RUN)
        : await session.execute({ kind: 'prompt', runId: RUN, attemptId: 'a1', message: 'research alpha and beta' });
  say(`RESULT ${JSON.stringify({ status: r.status, finalMessage: r.finalMessage, uncertainCalls: r.uncertainCalls })}`);
  await runtime.close();
  say('DONE');
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    say(`ERROR ${(e as Error)?.stack?.replace(/\n/g, ' | ') ?? String(e)}`);
    process.exit(1);
  },
);
