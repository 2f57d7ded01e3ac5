import type { Content, ContentPart } from '../contracts/content.js';
import type { ModelMessage } from '../contracts/message.js';
import { assertMediaType, dataUrl, nonText, OPENAI_CONTENT, unsupported } from './content-support.js';

// the wire shapes, written here so that the published declarations never import the optional `openai` package
type UserPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; image_url: { url: string } }
  | { type: 'file'; file: { file_data: string; filename: string } };
type Param = { role: 'user'; content: UserPart[] };

/**
 * Content parts on Chat Completions: a user message's parts as `text`, `image_url` (a URL, or the
 * bytes as a data URL) and `file` (`file_data`, PDF only) parts. A tool message takes text only: a
 * tool result's images and files go in a user message placed after the batch's tool messages
 * (`toolPartsMessage`), the tool message keeping the text and naming them.
 */
export function openaiUserParts(content: Exclude<Content, string>): UserPart[] {
  return content.map((p): UserPart => openaiPart(p));
}

function openaiPart(p: ContentPart): UserPart {
  if (p.type === 'text') return { type: 'text', text: p.text };
  if (p.type === 'image') {
    if ('url' in p) return { type: 'image_url', image_url: { url: p.url } };
    assertMediaType('openai', 'image', p.mediaType, OPENAI_CONTENT.image);
    return { type: 'image_url', image_url: { url: dataUrl(p.mediaType, p.data) } };
  }
  assertMediaType('openai', 'file', p.mediaType, OPENAI_CONTENT.file);
  return { type: 'file', file: { file_data: dataUrl(p.mediaType, p.data), filename: p.filename ?? 'document.pdf' } };
}

/** A tool message's text: its text parts, and a note naming the parts that follow it in a user message. */
export function toolText(m: ModelMessage): string {
  if (typeof m.content === 'string') return m.content;
  const text = m.content.flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');
  const n = nonText(m.content).length;
  return n === 0 ? text : `${text}${text ? '\n' : ''}[${n} attachment${n > 1 ? 's' : ''} of this result follow in the next user message]`;
}

/** The user message carrying the non-text parts of a batch's tool results, or undefined when they have none. */
export function toolPartsMessage(tools: readonly ModelMessage[]): Param | undefined {
  const parts: UserPart[] = [];
  for (const m of tools) {
    const other = nonText(m.content);
    if (other.length === 0) continue;
    parts.push({ type: 'text', text: `Attachments of the tool result ${m.toolCallId ?? ''}${m.name ? ` (${m.name})` : ''}:` });
    for (const p of other) parts.push(openaiPart(p));
  }
  return parts.length > 0 ? { role: 'user', content: parts } : undefined;
}

export { unsupported };
