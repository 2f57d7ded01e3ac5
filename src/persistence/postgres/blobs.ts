import type { BlobRef } from '../../contracts/content.js';
import { checkedBlob, sha256Of, type BlobStore } from '../blob-store.js';
import { unavailable, type Connections } from './connection.js';
import { ident } from './schema.js';

/**
 * The PostgreSQL store's blobs (blob-store.ts): the `blobs` table of its schema (migration 3),
 * one row per SHA-256, written with `ON CONFLICT DO NOTHING` so that writers racing on one blob
 * store it once. Never deleted.
 */
export class PgBlobs implements BlobStore {
  private readonly insert: string;
  private readonly select: string;
  private readonly exists: string;
  constructor(
    private readonly conns: Connections,
    private readonly ready: () => Promise<void>,
    private readonly assertOpen: () => void,
    schema: string,
  ) {
    const t = `${ident(schema)}.blobs`;
    this.insert = `INSERT INTO ${t} (sha256, size, bytes) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING`;
    this.select = `SELECT bytes FROM ${t} WHERE sha256 = $1`;
    this.exists = `SELECT 1 FROM ${t} WHERE sha256 = $1`;
  }

  async put(bytes: Uint8Array): Promise<BlobRef> {
    const sha256 = sha256Of(bytes);
    const ref = { sha256, size: bytes.length };
    if (await this.has(sha256)) return ref;
    const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    await this.run('putBlob', 'write', (c) => c.query({ text: this.insert, values: [sha256, bytes.length, data] }));
    return ref;
  }

  async get(sha256: string): Promise<Uint8Array | undefined> {
    const r = await this.run('getBlob', 'read', (c) => c.query({ text: this.select, values: [sha256] }));
    const row = r.rows[0] as { bytes: Buffer } | undefined;
    return row && checkedBlob(sha256, new Uint8Array(row.bytes.buffer, row.bytes.byteOffset, row.bytes.byteLength));
  }

  async has(sha256: string): Promise<boolean> {
    const r = await this.run('hasBlob', 'read', (c) => c.query({ text: this.exists, values: [sha256] }));
    return r.rows.length > 0;
  }

  private async run<T>(
    what: string,
    kind: 'read' | 'write',
    fn: (c: Parameters<Parameters<Connections['with']>[0]>[0]) => Promise<T>,
  ): Promise<T> {
    this.assertOpen();
    await this.ready();
    try {
      return await this.conns.with(fn);
    } catch (e) {
      throw unavailable(what, e, kind);
    }
  }
}
