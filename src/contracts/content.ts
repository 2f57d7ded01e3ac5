import { z } from 'zod';

export { contentDisplay, contentText, partsSummary } from './content-text.js';

/**
 * Content parts (DESIGN §10): a message's content is a string or a list of parts. This file is
 * the shape a model provider receives — every part resolved, bytes as base64 — so an adapter maps
 * it to its wire format without reading a store. How an app hands parts in (bytes as a
 * `Uint8Array`) and how the log keeps them (bytes stored once as a content-addressed blob) are
 * the runtime's concern, not a provider's.
 */

/** A media type such as `image/png` or `application/pdf`. */
export const MediaType = z.string().regex(/^[\w.+-]+\/[\w.+-]+$/, 'a media type such as "image/png"');

/**
 * Base64 text's alphabet (A–Z a–z 0–9 + /, `=` only at its end): the shape records and inbox
 * entries are read with. Bytes an app or a tool hands in must also be canonical (base64Issue),
 * checked where they are stored; a record written before that rule reads as it always did.
 */
export const Base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, 'base64 text');

/** The characters whose low 4 bits are zero (what may come before `==`) and whose low 2 bits are (before `=`). */
const BEFORE_PAD2 = 'AQgw';
const BEFORE_PAD1 = 'AEIMQUYcgkosw048';

/**
 * Why `text` is not canonical base64 of at least one byte, or undefined when it is: the alphabet
 * (Base64), a length that is a multiple of 4 (padded with `=`), and zero padding bits — so that it
 * decodes to exactly the bytes it spells, none cut off or changed. No decoding: one regex over the
 * text, then its last characters.
 * @example
 * base64Issue('ABC=') // 'not canonical base64: …'
 * base64Issue('AAE=') // undefined
 */
export function base64Issue(text: string): string | undefined {
  if (!Base64.safeParse(text).success) return 'not base64 text (the alphabet A–Z a–z 0–9 + /, padded with =)';
  const n = text.length;
  if (n === 0) return 'no bytes: an image or a file holds at least one';
  if (n % 4 !== 0) return `base64 text is padded with = to a multiple of 4 characters (this is ${n})`;
  const pad = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const last = text[n - 1 - pad]!;
  if ((pad === 2 && !BEFORE_PAD2.includes(last)) || (pad === 1 && !BEFORE_PAD1.includes(last)))
    return `not canonical base64: the bits "${last}" leaves over before the padding are not zero (they would be dropped)`;
  return undefined;
}

export const TextPart = z.strictObject({ type: z.literal('text'), text: z.string() });
export type TextPart = z.infer<typeof TextPart>;

/** An image: an http(s) URL the provider fetches, or the bytes themselves. */
export const ImagePart = z.union([
  z.strictObject({ type: z.literal('image'), url: z.url({ protocol: /^https?$/ }) }),
  z.strictObject({ type: z.literal('image'), data: Base64, mediaType: MediaType }),
]);
export type ImagePart = z.infer<typeof ImagePart>;

/** A file's bytes (e.g. a PDF), with its media type and, optionally, its name. */
export const FilePart = z.strictObject({
  type: z.literal('file'),
  data: Base64,
  mediaType: MediaType,
  filename: z.string().min(1).optional(),
});
export type FilePart = z.infer<typeof FilePart>;

export const ContentPart = z.union([TextPart, ImagePart, FilePart]);
export type ContentPart = z.infer<typeof ContentPart>;

/** A message's content: plain text, or parts. */
export const Content = z.union([z.string(), z.array(ContentPart)]);
export type Content = z.infer<typeof Content>;

/**
 * A blob the store keeps once, named by the SHA-256 of its bytes (lowercase hex) and its size in
 * bytes: what the log holds in place of an image's or a file's bytes (docs/event-log.md, "Blobs").
 */
export const BlobRef = z.strictObject({
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'a SHA-256 in lowercase hex'),
  size: z.number().int().nonnegative(),
});
export type BlobRef = z.infer<typeof BlobRef>;

const ImageUrlPart = z.strictObject({ type: z.literal('image'), url: z.url({ protocol: /^https?$/ }) });

/** An image or file part as the log keeps it: its bytes are a blob of the store, referenced. */
export const StoredImagePart = z.strictObject({ type: z.literal('image'), blob: BlobRef, mediaType: MediaType });
export const StoredFilePart = z.strictObject({
  type: z.literal('file'),
  blob: BlobRef,
  mediaType: MediaType,
  filename: z.string().min(1).optional(),
});
export const StoredContentPart = z.union([TextPart, ImageUrlPart, StoredImagePart, StoredFilePart]);
export type StoredContentPart = z.infer<typeof StoredContentPart>;

/** A message's content as the log (and a session's surface) keeps it: text, or parts whose bytes are blob references. */
export const StoredContent = z.union([z.string(), z.array(StoredContentPart)]);
export type StoredContent = z.infer<typeof StoredContent>;

/** Bytes as an app hands them in: a `Uint8Array` (a `Buffer` is one) or base64 text. */
export const BytesInput = z.union([z.custom<Uint8Array>((v) => v instanceof Uint8Array, 'a Uint8Array'), Base64]);

/**
 * A part as an app hands it in: text, an image by URL, an image or a file as bytes
 * (`Uint8Array` or base64) with a media type, or a part already stored (a blob reference read
 * from a log of the same store).
 */
export const InputContentPart = z.union([
  TextPart,
  ImageUrlPart,
  z.strictObject({ type: z.literal('image'), data: BytesInput, mediaType: MediaType }),
  z.strictObject({ type: z.literal('file'), data: BytesInput, mediaType: MediaType, filename: z.string().min(1).optional() }),
  StoredImagePart,
  StoredFilePart,
]);
export type InputContentPart = z.infer<typeof InputContentPart>;

/** A message's content as an app hands it in: text, or parts (at least one). */
export const InputContent = z.union([z.string(), z.array(InputContentPart).min(1)]);
export type InputContent = z.infer<typeof InputContent>;
