// A process holding one session on a PostgreSQL store (holders.test.ts): claims it, says so, and
// holds it until its stdin closes or it is killed. argv: <url> <schema> <sessionId>
import { postgresStore } from '../../src/index.js';
import { runChild, say } from '../crash/child-util.js';

runChild(async () => {
  const [url, schema, sessionId] = process.argv.slice(2) as [string, string, string];
  const store = postgresStore({ connectionString: url, schema });
  const refused = await store.holders!.claim(sessionId, { takeover: false });
  say(refused ? `REFUSED ${JSON.stringify(refused)}` : 'CLAIMED');
  await new Promise<void>((r) => process.stdin.on('close', r).resume());
  await store.close();
});
