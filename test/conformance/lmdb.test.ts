import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { tempDir } from '../helpers/tmp.js';
import { eventStoreContract } from './event-store.contract.js';

eventStoreContract('lmdb', async () => {
  const dir = tempDir();
  return { store: lmdbStore({ path: dir.path }), reopen: async () => lmdbStore({ path: dir.path }), cleanup: dir.cleanup };
});
