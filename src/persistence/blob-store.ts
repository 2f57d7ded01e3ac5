import { createHash } from 'node:crypto';
import { CorruptLogError } from '../contracts/errors.js';
import type { BlobRef } from '../contracts/content.js';

/**
 * A store's blobs (docs/event-log.md, "Blobs"): the bytes of images and files, each kept once,
 * named by the SHA-256 of its bytes, referenced from the log. Optional on an EventStore
 * (`store.blobs`): every built-in store has it; a store without it takes text content only.
 * Blobs are never deleted: compaction and every other operation leave them.
 */
export interface BlobStore {
  /** Stores `bytes` once (a blob already stored is not written again); resolves once durable, with its reference. */
  put(bytes: Uint8Array): Promise<BlobRef>;
  /**
   * The blob's bytes, or undefined when the store has none of that name. Bytes whose SHA-256 is
   * not their name: CorruptLogError naming the blob.
   */
  get(sha256: string): Promise<Uint8Array | undefined>;
  has(sha256: string): Promise<boolean>;
}

/** The SHA-256 of `bytes`, lowercase hex. */
export const sha256Of = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

/** The session name a blob's CorruptLogError carries: `(blob <sha256>)`. */
export const blobPlace = (sha256: string) => `(blob ${sha256})`;

/** `bytes` as read for the blob `sha256`, checked against its name (CorruptLogError naming the blob when they differ). */
export function checkedBlob(sha256: string, bytes: Uint8Array): Uint8Array {
  const actual = sha256Of(bytes);
  if (actual !== sha256)
    throw new CorruptLogError(blobPlace(sha256), 0, `blob ${sha256} is damaged: its ${bytes.length} bytes hash to ${actual}`);
  return bytes;
}

/** The blobs of the memory store: copies in a Map (nothing stored is shared with a caller). */
export class MemoryBlobs implements BlobStore {
  /** @internal the stored bytes, by name (tests damage them here). */
  readonly bytes = new Map<string, Uint8Array>();
  constructor(private readonly assertOpen: () => void) {}
  async put(bytes: Uint8Array): Promise<BlobRef> {
    this.assertOpen();
    const sha256 = sha256Of(bytes);
    if (!this.bytes.has(sha256)) this.bytes.set(sha256, Uint8Array.prototype.slice.call(bytes));
    return { sha256, size: bytes.length };
  }
  async get(sha256: string): Promise<Uint8Array | undefined> {
    this.assertOpen();
    const b = this.bytes.get(sha256);
    return b && checkedBlob(sha256, Uint8Array.prototype.slice.call(b));
  }
  async has(sha256: string): Promise<boolean> {
    this.assertOpen();
    return this.bytes.has(sha256);
  }
}

/** The blob names referenced in `value` (a record's payload): every `{ type: 'image' | 'file', blob: { sha256 } }` in it. */
export function blobRefsIn(value: unknown, out: Set<string> = new Set()): Set<string> {
  if (Array.isArray(value)) for (const v of value) blobRefsIn(v, out);
  else if (value !== null && typeof value === 'object') {
    const o = value as { type?: unknown; blob?: { sha256?: unknown } };
    if ((o.type === 'image' || o.type === 'file') && typeof o.blob?.sha256 === 'string') out.add(o.blob.sha256);
    else for (const v of Object.values(value)) blobRefsIn(v, out);
  }
  return out;
}
