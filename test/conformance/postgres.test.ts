import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { freshSchema, postgresForTests } from '../helpers/postgres.js';
import { eventStoreContract } from './event-store.contract.js';

const db = await postgresForTests('EventStore contract: postgres');
if (db) {
  eventStoreContract('postgres', async () => {
    const schema = freshSchema('conformance');
    const open = () => postgresStore({ connectionString: db.url, schema });
    return { store: open(), reopen: async () => open(), cleanup: async () => {} };
  });
}
