import type { SessionHead } from '../../src/persistence/head.js';
import { memoryStore } from '../../src/persistence/memory-store.js';
import type { MemoryBlobs } from '../../src/persistence/blob-store.js';
import { eventStoreContract } from './event-store.contract.js';

eventStoreContract('memory', async () => {
  const store = memoryStore();
  // the fault: the armed session's head is refused after its events were staged in the transaction
  let armed: string | undefined;
  const internals = store as unknown as { txn(): { putHead(h: SessionHead): void } };
  const txn = internals.txn.bind(store);
  internals.txn = () => {
    const t = txn();
    const putHead = t.putHead.bind(t);
    t.putHead = (h) => {
      if (h.sessionId === armed) throw new Error(`injected: ${armed}'s append fails after writing its events`);
      putHead(h);
    };
    return t;
  };
  return {
    store,
    cleanup: async () => {},
    failAfterWriting: { arm: (sid) => (armed = sid), disarm: () => (armed = undefined), sharesTransaction: false },
    blobs: {
      count: async () => (store.blobs as MemoryBlobs).bytes.size,
      damage: async (sha256, how) => {
        if (how === 'remove') (store.blobs as MemoryBlobs).bytes.delete(sha256);
        else (store.blobs as MemoryBlobs).bytes.get(sha256)![7]! ^= 1;
      },
    },
  };
});
