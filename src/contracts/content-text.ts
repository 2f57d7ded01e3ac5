/**
 * Reading content as text, for views (the web client, the CLI's log) and estimates: no zod, so
 * the browser client imports it (content.ts re-exports it).
 */

/** A stored part, structurally (content.ts's `StoredContentPart`). */
type Part =
  | { type: 'text'; text: string }
  | { type: 'image'; url: string }
  | { type: 'image'; blob: { sha256: string; size: number }; mediaType: string }
  | { type: 'file'; blob: { sha256: string; size: number }; mediaType: string; filename?: string };

/**
 * The text of a content in any of its forms (resolved, stored, as handed in): the string itself,
 * or its text parts joined (images and files left out).
 */
export function contentText(content: string | readonly { type: string; text?: string }[]): string {
  if (typeof content === 'string') return content;
  let text = '';
  for (const p of content) if (p.type === 'text') text += p.text ?? '';
  return text;
}

/** One line for a content's parts that are not text, e.g. `[image image/png 12.3 KiB] [file report.pdf]`. */
export function partsSummary(content: string | readonly Part[]): string {
  if (typeof content === 'string') return '';
  const out: string[] = [];
  for (const p of content) {
    if (p.type === 'text') continue;
    if ('url' in p) out.push(`[image ${p.url}]`);
    else if (p.type === 'image') out.push(`[image ${p.mediaType} ${kib(p.blob.size)}]`);
    else out.push(`[file ${p.filename ?? p.mediaType} ${kib(p.blob.size)}]`);
  }
  return out.join(' ');
}

const kib = (n: number) => (n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(1)} MiB`);

/** Text followed by the summary of its other parts: how a view shows a content. */
export function contentDisplay(content: string | readonly Part[]): string {
  if (typeof content === 'string') return content;
  const text = contentText(content);
  const parts = partsSummary(content);
  return text && parts ? `${text} ${parts}` : text || parts;
}
