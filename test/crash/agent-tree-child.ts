/**
 * Child program of test/crash/agent-tree.test.ts, test/agents/agent-postgres.test.ts and
 * test/agents/agent-serve.test.ts: one life of the agent tree (agent-tree.ts) in a real process.
 *
 *   node --import tsx test/crash/agent-tree-child.ts <dir> <killAt> [<store>] [serve]
 *
 * `<store>`: `pg:<url>#<schema>` (PostgreSQL) or, by default, the LMDB file `<dir>/db`; the ledger
 * is `<dir>/ledger`. Starts the root run, or continues it when a previous life left it open.
 * `killAt` SIGKILLs the process right after a durable append: `parent-intent` (the root's
 * tool/call), `child-intent` (a child's ledger tool/call), `child-end` (a child's settled
 * run/end), `parent-result` (the root's tool/result), or `none`.
 * Protocol lines: `READY`, `KILL <what>`, `RESULT <json>`, `DONE`, `ERROR <message>`.
 * With `serve`: a worker (`runtime.serve`, lease 1 s) that serves the tree's root when it is
 * submitted to; prints `READY`, then `EV <type> <sessionId>` per serve event, until killed or
 * `EXIT` on stdin.
 */
import { join } from 'node:path';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { createRuntime } from '../../src/runtime/runtime.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { nextLine, runChild, say } from './child-util.js';
import { agentTree, ROOT, RUN } from './agent-tree.js';

const [dir, killAt, storeSpec, mode] = process.argv.slice(2) as [string, string, string | undefined, string | undefined];

function openStore(): EventStore {
  if (storeSpec?.startsWith('pg:')) {
    const [url, schema] = storeSpec.slice(3).split('#');
    return postgresStore({ connectionString: url!, schema: schema!, maxConnections: 4 });
  }
  return lmdbStore({ path: join(dir, 'db') });
}

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

async function serveTree(): Promise<void> {
  const store = killingStore(openStore(), KILLS[killAt]);
  const runtime = createRuntime({ store, ...agentTree(join(dir, 'ledger'), 40) });
  const worker = runtime.serve({ concurrency: 4, leaseMs: 1000, pollMs: 50 });
  worker.subscribe((e) => say(`EV ${e.type} ${'sessionId' in e ? (e.sessionId ?? '') : ''}`));
  say('READY');
  await nextLine((l) => l === 'EXIT');
  await worker.stop();
  await runtime.close();
  say('DONE');
}

async function main(): Promise<void> {
  if (mode === 'serve') return serveTree();
  const store = killingStore(openStore(), KILLS[killAt]);
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

runChild(main);
