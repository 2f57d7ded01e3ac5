import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { eventStoreContract } from './event-store.contract.js';

const db = await postgresForTests('EventStore contract: postgres');
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
    };
  });
}
