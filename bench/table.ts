/**
 * Tiny helpers for the benchmarks: order statistics and an aligned text table (pipe-separated,
 * so the output can be pasted into Markdown as is).
 */

/** Nearest-rank percentile (`p` in 0..100) of the samples; NaN for no samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil((Math.min(100, Math.max(0, p)) / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

/** Median (mean of the two middle samples for an even count); NaN for no samples. */
export function median(samples: readonly number[]): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Formats a number with `digits` decimals; '-' for undefined / NaN. */
export function fmt(value: number | undefined, digits = 0): string {
  if (value === undefined || !Number.isFinite(value)) return '-';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export type Cell = string | number | undefined;
export type Align = 'left' | 'right';

/**
 * Renders rows under headers as an aligned, pipe-separated table. Numbers are formatted with
 * `fmt` and right-aligned; strings are left-aligned unless `align` says otherwise.
 */
export function formatTable(headers: readonly string[], rows: readonly (readonly Cell[])[], align: readonly Align[] = []): string {
  const text = rows.map((row) => headers.map((_, i) => cellText(row[i])));
  const alignOf = (i: number): Align =>
    align[i] ?? (rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || r[i] === undefined) ? 'right' : 'left');
  const widths = headers.map((h, i) => Math.max(h.length, ...text.map((r) => r[i]!.length)));
  const pad = (s: string, i: number) => (alignOf(i) === 'right' ? s.padStart(widths[i]!) : s.padEnd(widths[i]!));
  const line = (cells: readonly string[]) => `| ${cells.map(pad).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (alignOf(i) === 'right' ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`;
  return [line(headers), rule, ...text.map(line)].join('\n');
}

export function printTable(headers: readonly string[], rows: readonly (readonly Cell[])[], align?: readonly Align[]): void {
  console.log(formatTable(headers, rows, align));
}

function cellText(c: Cell): string {
  if (c === undefined) return '-';
  return typeof c === 'number' ? fmt(c) : c;
}
