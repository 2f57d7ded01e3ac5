import { z } from 'zod';

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

/** The text of a content: the string itself, or its text parts joined (images and files left out). */
export function contentText(content: Content): string {
  if (typeof content === 'string') return content;
  let text = '';
  for (const p of content) if (p.type === 'text') text += p.text;
  return text;
}
