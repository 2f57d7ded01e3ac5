/**
 * Child program for the web stream tests: another process appending to a session's log.
 *
 *   node --import tsx test/web/append-child.ts <lmdb|pg> <path|url> <sessionId> <count> [--pause-ms=N] [--schema=S]
 *
 * Attaches a writer, prints `ATTACHED <epoch> <lastSeq>`, appends `count` batches of one or two
 * events (a pause between them), printing `ACK <firstSeq> <lastSeq>` after each append resolved,
 * then `DONE`. On an error: `ERROR <name> <message>`, exit 1.
 */
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';

const [kind, where, sessionId, countArg, ...flags] = process.argv.slice(2);
const pauseMs = Number(flags.find((f) => f.startsWith('--pause-ms='))?.split('=')[1] ?? 20);
const schema = flags.find((f) => f.startsWith('--schema='))?.split('=')[1];
const store = kind === 'pg' ? postgresStore({ connectionString: where!, ...(schema ? { schema } : {}) }) : lmdbStore({ path: where! });
const say = (line: string) => process.stdout.write(`${line}\n`);

try {
  const { writerEpoch, lastSeq } = await store.attachWriter(sessionId!);
  say(`ATTACHED ${writerEpoch} ${lastSeq}`);
  let next = lastSeq + 1;
  for (let i = 0; i < Number(countArg); i++) {
    const size = 1 + (i % 2);
    const drafts = Array.from({ length: size }, (_, k) => ({
      type: 'user/message' as const,
      turn: 0,
      step: 0,
      attempt: 0,
      surfaceOp: 'append' as const,
      payload: { message: { role: 'user' as const, content: `child ${process.pid} batch ${i} #${k}` } },
    }));
    const written = await store.append(sessionId!, writerEpoch, next, drafts);
    say(`ACK ${written[0]!.seq} ${written.at(-1)!.seq}`);
    next = written.at(-1)!.seq + 1;
    await new Promise((r) => setTimeout(r, pauseMs));
  }
  say('DONE');
  await store.close();
} catch (e) {
  say(`ERROR ${(e as Error).name} ${(e as Error).message}`);
  process.exit(1);
}
