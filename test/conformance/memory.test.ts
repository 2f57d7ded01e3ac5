import { memoryStore } from '../../src/persistence/memory-store.js';
import { eventStoreContract } from './event-store.contract.js';

eventStoreContract('memory', async () => ({ store: memoryStore(), cleanup: async () => {} }));
