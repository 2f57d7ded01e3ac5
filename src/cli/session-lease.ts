import type { SessionHolder } from '../contracts/errors.js';
import type { EventStore } from '../persistence/event-store.js';

/** A serving worker's lease on a session (runtime.serve, docs/scale-out.md), as the store lists it. */
export interface SessionLease {
  sessionId: string;
  workerId: string | null;
  writerEpoch: number | null;
  leaseUntil: string | null;
  expired: boolean;
}

/** The part of a store's `work` (the inbox and leases of runtime.serve) that `recover --resume` reads. */
interface LeaseList {
  listLeases(): Promise<readonly SessionLease[]>;
}

/**
 * The unexpired lease a serving worker holds on `sessionId`, if the store keeps leases
 * (`store.work`, present on stores that runtime.serve can serve) and one is held; else undefined.
 * @example
 * const lease = await liveLeaseOf(store, 's1') // { workerId: 'w1', leaseUntil: '…', … } | undefined
 */
export async function liveLeaseOf(store: EventStore, sessionId: string): Promise<SessionLease | undefined> {
  const work = (store as { readonly work?: LeaseList }).work;
  if (typeof work?.listLeases !== 'function') return undefined;
  const leases = await work.listLeases();
  return leases.find((l) => l.sessionId === sessionId && l.workerId !== null && !l.expired);
}

/**
 * The live process the store records as running `sessionId` (`store.holders.holderOf`), if the
 * store keeps holders and that process lives; else undefined. Reads only.
 * @example
 * const holder = await liveHolderOf(store, 's1') // { host: 'box', pid: 4242 } | undefined
 */
export async function liveHolderOf(store: EventStore, sessionId: string): Promise<SessionHolder | undefined> {
  return store.holders?.holderOf?.(sessionId);
}
