import pg from 'pg';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { eventStoreContract } from './event-store.contract.js';

const db = await postgresForTests('EventStore contract: postgres');
/** One statement on the test database, behind the store's back. */
async function sql(text: string, values: unknown[] = []): Promise<{ rows: Record<string, unknown>[] }> {
  const client = new pg.Client({ connectionString: db!.url });
  await client.connect();
  try {
    return await client.query(text, values);
  } finally {
    await client.end();
  }
}
if (db) {
  eventStoreContract('postgres', async () => {
    const schema = freshSchema('conformance');
    // the fault: the store's beforeCommit hook throws for the armed session, inside its
    // transaction after the writes (one transaction per append: the others commit on their own)
    let armed: string | undefined;
    const beforeCommit = (sid: string) => {
      if (sid === armed) throw new Error(`injected: ${armed}'s append fails after writing its events`);
    };
    const open = () => postgresStore({ connectionString: db.url, schema, beforeCommit });
    return {
      store: open(),
      reopen: async () => open(),
      cleanup: async () => {},
      failAfterWriting: { arm: (sid) => (armed = sid), disarm: () => (armed = undefined), sharesTransaction: false },
      blobs: {
        count: async () => Number((await sql(`SELECT count(*) AS n FROM "${schema}".blobs`)).rows[0].n),
        damage: async (sha256, how) => {
          if (how === 'remove') await sql(`DELETE FROM "${schema}".blobs WHERE sha256 = $1`, [sha256]);
          else
            await sql(`UPDATE "${schema}".blobs SET bytes = overlay(bytes placing '\\x00'::bytea from 8 for 1) WHERE sha256 = $1`, [
              sha256,
            ]);
        },
      },
    };
  });
}
