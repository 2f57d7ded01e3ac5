import { z } from 'zod';
import {
  base64Issue,
  type Content,
  type ContentPart,
  type InputContent,
  type InputContentPart,
  type StoredContent,
  type StoredContentPart,
} from '../contracts/content.js';
import { CorruptLogError, ValidationError } from '../contracts/errors.js';
import type { Message, ModelMessage } from '../contracts/message.js';
import type { ContentSupport, ModelProvider } from '../contracts/model.js';
import { blobPlace, type BlobStore } from './blob-store.js';

/**
 * Content parts between an app, the log and a model (docs/providers.md, "Content parts"): bytes
 * an app hands in are stored once as blobs (blob-store.ts) and the log keeps references
 * (`storeContent`); before a model call every reference is read back as base64
 * (`resolveMessages`). Text content passes through both untouched.
 */

const MiB = 1024 * 1024;

/** Size limits of content parts' bytes (`createRuntime({ contentLimits })`). */
export const ContentLimits = z.strictObject({
  /** Bytes of one image or file (default 20 MiB). */
  maxBlobBytes: z
    .number()
    .int()
    .positive()
    .default(20 * MiB),
  /** Bytes of every image and file of one message together (default 50 MiB). */
  maxMessageBytes: z
    .number()
    .int()
    .positive()
    .default(50 * MiB),
});
export type ContentLimits = z.output<typeof ContentLimits>;
export const DEFAULT_CONTENT_LIMITS: ContentLimits = ContentLimits.parse({});

/**
 * Why the model cannot take a part, or undefined when it can: image or file bytes (or a stored
 * reference to them) of a media type outside its `contentSupport`. An image by URL, text, and any
 * part for a model that declares no `contentSupport` are taken.
 */
export function partNotTaken(p: InputContentPart | StoredContentPart, model: ModelProvider): string | undefined {
  const takes: ContentSupport | undefined = model.contentSupport;
  if (!takes || !('mediaType' in p)) return undefined;
  const allowed = p.type === 'image' ? takes.image : takes.file;
  if (allowed.includes(p.mediaType)) return undefined;
  const offered = allowed.join(', ') || 'no media type';
  return `the model ${model.modelId} does not take an ${p.type} of media type ${p.mediaType} (it takes ${p.type}s of ${offered})`;
}

/**
 * Refuses (ValidationError at `where`, naming each part's path and media type) messages with a
 * part `model` cannot take (partNotTaken): checked before anything is stored or logged, so that a
 * part the model would refuse on every later call never enters the session's history.
 */
export function assertContentTaken(
  messages: readonly { content: InputContent | StoredContent }[],
  model: ModelProvider,
  where: string,
): void {
  if (!model.contentSupport) return;
  const issues = messages.flatMap((m, i) =>
    typeof m.content === 'string'
      ? []
      : m.content.flatMap((p, j) => {
          const why = partNotTaken(p, model);
          return why ? [{ path: [i, 'content', j], message: why }] : [];
        }),
  );
  if (issues.length > 0) throw new ValidationError(where, issues);
}

/** Whether any message has parts (not plain text). */
export const anyParts = (messages: readonly { content: unknown }[]): boolean => messages.some((m) => typeof m.content !== 'string');

const bytesOf = (data: Uint8Array | string): Uint8Array => (typeof data === 'string' ? Buffer.from(data, 'base64') : data);

/**
 * The byte length base64 text (Base64: no whitespace, `=` only at its end) decodes to, as Node
 * decodes it: 6 bits a character before the padding.
 */
const decodedLength = (b64: string): number => Math.floor((b64.replace(/=+$/, '').length * 6) / 8);

/**
 * Refuses (ValidationError at `where`, `path` and the part's index) content whose bytes break
 * `limits`, are none, or whose base64 text is not canonical (base64Issue) — without decoding it:
 * checked when a run is asked for (session.run) and again when its content is stored.
 */
export function assertContentLimits(
  content: InputContent,
  limits: ContentLimits,
  where: string,
  path: (string | number)[] = ['content'],
): void {
  if (typeof content === 'string') return;
  const refuse = (i: number, message: string) => new ValidationError(where, [{ path: [...path, i], message }]);
  let total = 0;
  for (const [i, p] of content.entries()) {
    if (!('data' in p)) continue;
    const notBase64 = typeof p.data === 'string' ? base64Issue(p.data) : undefined;
    if (notBase64) throw refuse(i, `data: ${notBase64}`);
    if (p.data.length === 0) throw refuse(i, 'data: no bytes: an image or a file holds at least one');
    const size = typeof p.data === 'string' ? decodedLength(p.data) : p.data.length;
    if (size > limits.maxBlobBytes)
      throw refuse(
        i,
        `the ${p.type} is ${size} bytes, over the limit of ${limits.maxBlobBytes} bytes per blob (contentLimits.maxBlobBytes)`,
      );
    total += size;
    if (total > limits.maxMessageBytes)
      throw refuse(i, `the message's images and files pass ${limits.maxMessageBytes} bytes together (contentLimits.maxMessageBytes)`);
  }
}

/**
 * `content` as the log keeps it: each image's or file's bytes stored as a blob of `blobs`, the
 * part replaced by its reference. A part stored already must name a blob the store has. Refused
 * (ValidationError at `where`, `path`) before anything is stored: bytes over `maxBlobBytes`, a
 * message's bytes over `maxMessageBytes`, bytes on a store without blobs, a reference to a blob
 * the store does not have.
 */
export async function storeContent(
  content: InputContent,
  blobs: BlobStore | undefined,
  limits: ContentLimits,
  where: string,
  path: (string | number)[] = ['content'],
): Promise<StoredContent> {
  if (typeof content === 'string') return content;
  const refuse = (i: number, message: string) => new ValidationError(where, [{ path: [...path, i], message }]);
  assertContentLimits(content, limits, where, path);
  const bytes: (Uint8Array | undefined)[] = content.map((p) => ('data' in p ? bytesOf(p.data) : undefined));
  const needsStore = content.some((p) => 'data' in p || 'blob' in p);
  if (needsStore && !blobs) throw refuse(0, 'this store keeps no blobs (store.blobs): it takes text content only');
  const out: StoredContentPart[] = [];
  for (const [i, p] of content.entries()) {
    if ('blob' in p) {
      if (!(await blobs!.has(p.blob.sha256))) throw refuse(i, `blob ${p.blob.sha256} is not in this store`);
      out.push(p);
    } else if ('data' in p) {
      const blob = await blobs!.put(bytes[i]!);
      out.push(
        p.type === 'image'
          ? { type: 'image', blob, mediaType: p.mediaType }
          : { type: 'file', blob, mediaType: p.mediaType, ...(p.filename !== undefined ? { filename: p.filename } : {}) },
      );
    } else out.push(p);
  }
  return out;
}

/** `messages` with every content stored (storeContent); the same array when all are text. */
export async function storeMessages<M extends { content: InputContent }>(
  messages: readonly M[],
  blobs: BlobStore | undefined,
  limits: ContentLimits,
  where: string,
): Promise<(Omit<M, 'content'> & { content: StoredContent })[]> {
  if (!anyParts(messages)) return messages as unknown as (Omit<M, 'content'> & { content: StoredContent })[];
  const out = [];
  for (const [i, m] of messages.entries()) out.push({ ...m, content: await storeContent(m.content, blobs, limits, where, [i, 'content']) });
  return out;
}

/** A stored part as a model receives it: a blob reference read back as base64 (CorruptLogError naming a blob missing or damaged). */
async function resolvePart(p: StoredContentPart, blobs: BlobStore | undefined): Promise<ContentPart> {
  if (!('blob' in p)) return p;
  const bytes = await blobs?.get(p.blob.sha256);
  if (!bytes)
    throw new CorruptLogError(blobPlace(p.blob.sha256), 0, `blob ${p.blob.sha256} is missing from the store (the log references it)`);
  const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
  return p.type === 'image'
    ? { type: 'image', data, mediaType: p.mediaType }
    : { type: 'file', data, mediaType: p.mediaType, ...(p.filename !== undefined ? { filename: p.filename } : {}) };
}

/** A content as a model receives it (resolvePart for each part). */
export async function resolveContent(content: StoredContent, blobs: BlobStore | undefined): Promise<Content> {
  if (typeof content === 'string') return content;
  const out: ContentPart[] = [];
  for (const p of content) out.push(await resolvePart(p, blobs));
  return out;
}

/** The messages of a model request, every blob reference resolved; the same array when all are text (the common case). */
export async function resolveMessages(messages: readonly Message[], blobs: BlobStore | undefined): Promise<readonly ModelMessage[]> {
  if (!anyParts(messages)) return messages as readonly ModelMessage[];
  const out: ModelMessage[] = [];
  for (const m of messages)
    out.push(typeof m.content === 'string' ? (m as ModelMessage) : { ...m, content: await resolveContent(m.content, blobs) });
  return out;
}
