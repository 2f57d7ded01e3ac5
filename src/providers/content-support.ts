import { contentText, type Content, type ContentPart } from '../contracts/content.js';
import { ProviderError } from '../contracts/errors.js';
import type { ContentSupport } from '../contracts/model.js';

/**
 * What each built-in adapter does with content parts (docs/providers.md, "Content parts"). A part
 * its API cannot take is refused before any request is sent: a ProviderError with code
 * `unsupported_content`, not retryable, naming the provider, the message and the part.
 */

export const unsupported = (provider: string, what: string) =>
  new ProviderError(`${provider}: ${what}`, { retryable: false, code: 'unsupported_content' });

/** A data URL of a part's base64 bytes. */
export const dataUrl = (mediaType: string, data: string) => `data:${mediaType};base64,${data}`;

/** The text of a content that may hold text parts only (system and assistant messages); any other part refused. */
export function textOnlyContent(provider: string, content: Content, role: string): string {
  if (typeof content === 'string') return content;
  const other = content.find((p) => p.type !== 'text');
  if (other) throw unsupported(provider, `a ${role} message cannot carry an ${other.type} part (only user messages and tool results can)`);
  return contentText(content);
}

/** The parts that are not text. */
export const nonText = (content: Content): Exclude<ContentPart, { type: 'text' }>[] =>
  typeof content === 'string' ? [] : (content.filter((p) => p.type !== 'text') as Exclude<ContentPart, { type: 'text' }>[]);

/** Refuses a media type outside `allowed` for a part of `kind`. */
export function assertMediaType(provider: string, kind: string, mediaType: string, allowed: readonly string[]): void {
  if (!allowed.includes(mediaType))
    throw unsupported(provider, `an ${kind} of media type ${mediaType} is not supported (supported: ${allowed.join(', ')})`);
}

/** Image media types both APIs take as bytes. */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'] as const;

/** What OpenAI's APIs take as bytes (Chat Completions and Responses alike): the images above, PDF files. */
export const OPENAI_CONTENT: ContentSupport = { image: IMAGE_TYPES, file: ['application/pdf'] };

/** What the Messages API takes as bytes: the images above, PDF and plain-text documents. */
export const ANTHROPIC_CONTENT: ContentSupport = { image: IMAGE_TYPES, file: ['application/pdf', 'text/plain'] };
