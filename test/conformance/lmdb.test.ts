import type { Database } from 'lmdb';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { tempDir } from '../helpers/tmp.js';
import { eventStoreContract } from './event-store.contract.js';

eventStoreContract('lmdb', async () => {
  const dir = tempDir();
  const store = lmdbStore({ path: dir.path });
  // the fault: the armed session's head put fails inside the group's write transaction, after its
  // events and ids were put (applyAppend writes the head last)
  let armed: string | undefined;
  const blobDb = () => (store as unknown as { dbs: { blobs: Database<Buffer, string> } }).dbs.blobs;
  const heads = (store as unknown as { dbs: { heads: { putSync(key: string, value: unknown): unknown } } }).dbs.heads;
  const putSync = heads.putSync.bind(heads);
  heads.putSync = (key, value) => {
    if (key === armed) throw new Error(`injected: ${armed}'s append fails after writing its events`);
    return putSync(key, value);
  };
  return {
    store,
    reopen: async () => lmdbStore({ path: dir.path }),
    cleanup: dir.cleanup,
    failAfterWriting: { arm: (sid) => (armed = sid), disarm: () => (armed = undefined), sharesTransaction: true },
    blobs: {
      count: async () => blobDb().getCount(),
      // behind the store's back: a write of the database itself, never journaled
      damage: async (sha256, how) => {
        const db = blobDb();
        if (how === 'remove') await db.remove(sha256);
        else {
          const bytes = Buffer.from(db.get(sha256)!);
          bytes[7]! ^= 1;
          await db.put(sha256, bytes);
        }
      },
    },
  };
});
