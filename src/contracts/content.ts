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

/** Base64 text (standard alphabet, padded). */
export const Base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, 'base64 text');

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
