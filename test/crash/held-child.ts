/**
 * Child of test/crash/session-held.test.ts: opens session `<sessionId>` of the store named by
 * `lmdb <path>` or `pg <url> <schema>` and holds it until killed.
 *   node held-child.ts <lmdb|pg> <path|url> [schema] <sessionId> [--takeover]
 * Prints `HELD <pid> <writerEpoch>` once open, or `REFUSED <host> <pid>` (SessionHeldError: the
 * holder it names) and exits.
 */
import { createRuntime, isSessionHeldError, lmdbStore, scriptedModel, type EventStore } from '../../src/index.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';

const args = process.argv.slice(2);
const takeover = args.includes('--takeover');
const [kind, where, ...rest] = args.filter((a) => a !== '--takeover');
const store: EventStore = kind === 'pg' ? postgresStore({ connectionString: where!, schema: rest[0]! }) : lmdbStore({ path: where! });
const sessionId = kind === 'pg' ? rest[1]! : rest[0]!;
const runtime = createRuntime({ store, model: scriptedModel(['unused']) });
try {
  const session = await runtime.openSession(sessionId, { takeover });
  process.stdout.write(`HELD ${process.pid} ${session.recovery.writerEpoch}\n`);
  setInterval(() => undefined, 60_000); // held until SIGKILL
} catch (e) {
  if (!isSessionHeldError(e)) throw e;
  process.stdout.write(`REFUSED ${e.holder.host} ${e.holder.pid}\n`);
  await runtime.close();
}
