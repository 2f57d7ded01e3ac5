import type { Content, ContentPart } from '../contracts/content.js';
import { ANTHROPIC_CONTENT, assertMediaType } from './content-support.js';

/** A Messages API content block, as the adapter builds them. */
type Block = Record<string, unknown> & { type: string };

/**
 * Content parts on the Messages API: `text` blocks, `image` blocks (a `url` source, or a
 * `base64` source for the bytes) and `document` blocks (a PDF as a `base64` source, plain text as
 * a `text` source), in user messages and in `tool_result` content alike.
 */
export function anthropicBlocks(content: Content): Block[] {
  if (typeof content === 'string') return content ? [{ type: 'text', text: content }] : [];
  return content.flatMap((p) => (p.type === 'text' && p.text === '' ? [] : [anthropicBlock(p)]));
}

function anthropicBlock(p: ContentPart): Block {
  if (p.type === 'text') return { type: 'text', text: p.text };
  if (p.type === 'image') {
    if ('url' in p) return { type: 'image', source: { type: 'url', url: p.url } };
    assertMediaType('anthropic', 'image', p.mediaType, ANTHROPIC_CONTENT.image);
    return { type: 'image', source: { type: 'base64', media_type: p.mediaType, data: p.data } };
  }
  assertMediaType('anthropic', 'file', p.mediaType, ANTHROPIC_CONTENT.file);
  const title = p.filename !== undefined ? { title: p.filename } : {};
  return p.mediaType === 'text/plain'
    ? {
        type: 'document',
        source: { type: 'text', media_type: 'text/plain', data: Buffer.from(p.data, 'base64').toString('utf8') },
        ...title,
      }
    : { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: p.data }, ...title };
}
