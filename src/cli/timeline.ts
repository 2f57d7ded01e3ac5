import { z } from 'zod';
import { EventRecord } from '../contracts/events.js';
import { parseInput } from '../contracts/validate.js';
import { summarize } from './format.js';
import { quote } from './invocation.js';
import { TIMELINE_CSS, TIMELINE_JS } from './timeline-assets.js';
import { buildTimeline, type Mark, type Span, type TimelineModel } from './timeline-model.js';
import { childLanes, ChildTimelineSchema, type ChildLanes, type ChildTimeline } from './timeline-children.js';

export interface TimelineOptions {
  sessionId: string;
  /** Shown in the header; defaults to now. */
  generatedAt?: Date;
  /** Pixels for the active (non-idle) time; the page scrolls when a long session needs more. */
  width?: number;
  /** The child sessions of its agentTool calls (`readChildTimelines`): drawn under its rows and listed. */
  children?: ChildTimeline[];
  /**
   * The command the child-session table prints to draw a child's own page, as
   * `<command> <child id> <flag>`: `{ command: 'npx actorloop view', flag: '--data /srv/data' }`
   * (default `actorloop view <child id>`, which reads ./.actorloop).
   */
  childView?: { command: string; flag: string };
}

/** Idle stretches longer than this are collapsed into a fixed-width break. */
const GAP_MS = 2000;
const GAP_PX = 56;
const LEFT = 96;
const TOP = 44;
const ROW = 26;
const BAR = 18;
const MARK_ROW = 58;
const PAD = 10;

/** Escapes text for HTML and SVG (element content and attribute values). */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** JSON safe inside a <script> element (no `</script>`, no line separators). */
export function scriptJson(v: unknown): string {
  return JSON.stringify(v)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 59_950) return `${(ms / 1000).toFixed(ms < 9_950 ? 1 : 0)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  const m = Math.round(s / 60);
  if (m < 1440) return `${Math.floor(m / 60)} h ${m % 60} min`;
  const h = Math.round(m / 60);
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

interface Cluster {
  start: number;
  end: number;
  x0: number;
}

/** A time → x mapping where idle gaps longer than GAP_MS are collapsed to GAP_PX. */
export function makeAxis(intervals: readonly [number, number][], width: number) {
  const sorted = [...intervals].sort((a, b) => a[0] - b[0]);
  const clusters: Cluster[] = [];
  for (const [s, e] of sorted) {
    const last = clusters[clusters.length - 1];
    if (last && s - last.end <= GAP_MS) last.end = Math.max(last.end, e);
    else clusters.push({ start: s, end: e, x0: 0 });
  }
  const active = clusters.reduce((n, c) => n + (c.end - c.start), 0);
  const pxPerMs = active > 0 ? Math.max(width / active, Math.min(0.05, 40_000 / active)) : 1;
  let x = LEFT + PAD;
  const gaps: { x0: number; x1: number; ms: number }[] = [];
  clusters.forEach((c, i) => {
    if (i > 0) {
      gaps.push({ x0: x, x1: x + GAP_PX, ms: c.start - clusters[i - 1]!.end });
      x += GAP_PX;
    }
    c.x0 = x + PAD;
    x = c.x0 + (c.end - c.start) * pxPerMs + PAD;
  });
  const at = (t: number): number => {
    let c = clusters[0];
    for (const k of clusters) if (k.start <= t) c = k;
    if (!c) return LEFT + PAD;
    return c.x0 + (Math.min(Math.max(t, c.start), c.end) - c.start) * pxPerMs;
  };
  return { at, clusters, gaps, pxPerMs, right: x + PAD };
}

const STEPS_MS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000,
];

function ticks(axis: ReturnType<typeof makeAxis>, height: number): string {
  const step = STEPS_MS.find((s) => s * axis.pxPerMs >= 80) ?? 3_600_000;
  const out: string[] = [];
  const labelled: number[] = [];
  const free = (x: number) => labelled.every((l) => Math.abs(l - x) >= 64);
  for (const g of axis.gaps) {
    const x = (g.x0 + g.x1) / 2;
    labelled.push(x);
    out.push(
      `<g class="gap"><rect x="${g.x0.toFixed(1)}" y="${TOP - 6}" width="${GAP_PX}" height="${height - TOP + 6}"/>` +
        `<text x="${x.toFixed(1)}" y="${TOP - 12}" text-anchor="middle">${escapeHtml(`⋯ ${formatDuration(g.ms)}`)}</text></g>`,
    );
  }
  // Each stretch of activity: its clock time, then ticks counted from its start.
  for (const c of axis.clusters) {
    out.push(
      `<text class="clock" x="${axis.at(c.start).toFixed(1)}" y="14">` +
        `${escapeHtml(new Date(c.start).toISOString().slice(11, 23))} UTC</text>`,
    );
    for (let t = c.start; t <= c.end; t += step) {
      const x = axis.at(t);
      const label = free(x)
        ? `<text x="${x.toFixed(1)}" y="${TOP - 12}" text-anchor="middle">+${escapeHtml(formatDuration(t - c.start))}</text>`
        : '';
      if (label) labelled.push(x);
      out.push(`<g class="tick"><line x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${TOP - 8}" y2="${height}"/>${label}</g>`);
    }
  }
  return out.join('');
}

function bar(s: Span, x0: number, x1: number, y: number): string {
  // a call without a result has no known end: drawn wide enough to see, labelled with a '?'
  const w = Math.max(s.classes.includes('outcome-unresolved') ? 36 : 3, x1 - x0);
  const fits = s.label.length * 6.1 + 8 <= w;
  return (
    `<g class="bar ${s.row} ${s.classes.map(escapeHtml).join(' ')}" data-seqs="${s.seqs.join(',')}" ` +
    `data-title="${escapeHtml(s.title)}" tabindex="0">` +
    `<rect x="${x0.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${BAR}" rx="3"/>` +
    (fits ? `<text x="${(x0 + 4).toFixed(1)}" y="${y + 13}">${escapeHtml(s.label)}</text>` : '') +
    `</g>`
  );
}

function mark(m: Mark, x: number, y: number, level: number): string {
  const shape =
    m.kind === 'attach'
      ? `<circle class="shape" cx="${x.toFixed(1)}" cy="${y}" r="5.5"/>`
      : `<path class="shape" d="M${x.toFixed(1)} ${y - 6.5}l6.5 6.5l-6.5 6.5l-6.5 -6.5z"/>`;
  return (
    `<g class="mark ${m.classes.map(escapeHtml).join(' ')}" data-seqs="${m.seqs.join(',')}" ` +
    `data-title="${escapeHtml(m.title)}" tabindex="0">${shape}` +
    `<text x="${(x + 8).toFixed(1)}" y="${y + 4 + level * 14}">${escapeHtml(m.label)}</text></g>`
  );
}

const defs = `<defs>
<pattern id="gap-hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
  <rect width="8" height="8" fill="#f3f4f7"/><line x1="0" y1="0" x2="0" y2="8" stroke="#dde1e8" stroke-width="4"/></pattern>
<pattern id="uncertain-hatch" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
  <rect width="7" height="7" fill="#f1d9f6"/><line x1="0" y1="0" x2="0" y2="7" stroke="#c77bd8" stroke-width="3"/></pattern>
<pattern id="cancel-hatch" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)">
  <rect width="7" height="7" fill="#fde9cf"/><line x1="0" y1="0" x2="0" y2="7" stroke="#f0b466" stroke-width="3"/></pattern>
<pattern id="interrupted-hatch" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
  <rect width="7" height="7" fill="#fbe3e3"/><line x1="0" y1="0" x2="0" y2="7" stroke="#eeaaaa" stroke-width="3"/></pattern>
<pattern id="open-hatch" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
  <rect width="7" height="7" fill="#e3eaf5"/><line x1="0" y1="0" x2="0" y2="7" stroke="#c2d0e6" stroke-width="3"/></pattern>
</defs>`;

/**
 * The stretches of real activity, which the axis keeps: model and tool calls, and every event's
 * instant. Runs, attempts and steps are left out (a run suspended for an hour, or resumed after a
 * crash, would otherwise hide the idle gap), and so are tool calls resolved by recovery.
 */
function activity(model: TimelineModel, children: readonly ChildLanes[]): [number, number][] {
  const out: [number, number][] = model.marks.map((m) => [m.at, m.at]);
  for (const s of [...model.spans, ...children.flatMap((c) => childSpans(c))]) {
    if ((s.row === 'model' || s.row === 'tool') && !s.classes.includes('recovered')) out.push([s.start, s.end]);
    else out.push([s.start, s.start], [s.end, s.end]);
  }
  return out.length ? out : [[0, 0]];
}

/** A child's run, model and tool bars, titled with the child session (the page's event list is its parent's). */
const childSpans = (c: ChildLanes): Span[] =>
  c.model.spans
    .filter((s) => s.row === 'run' || s.row === 'model' || s.row === 'tool')
    .map((s) => ({
      ...s,
      seqs: [],
      classes: [...s.classes, 'child'],
      title: `child session ${c.sessionId} (call ${c.callId}): ${s.title}`,
    }));

function svgOf(model: TimelineModel, width: number, children: readonly ChildLanes[]): string {
  const axis = makeAxis(activity(model, children), width);
  const rows: { key: string; label: string; indent?: number }[] = [
    { key: 'run', label: 'runs' },
    { key: 'attempt', label: 'attempts' },
    { key: 'step', label: 'steps' },
    { key: 'model', label: 'model calls' },
    ...Array.from({ length: model.toolLanes }, (_, i) => ({ key: `tool${i}`, label: i === 0 ? 'tool calls' : '' })),
  ];
  // each child session's rows under its parent's: its runs (labelled with the parent's call), model calls, tool calls
  const placed: { span: Span; key: string }[] = model.spans.map((s) => ({ span: s, key: s.row === 'tool' ? `tool${s.lane ?? 0}` : s.row }));
  children.forEach((c, i) => {
    const indent = c.depth - 1;
    rows.push(
      { key: `c${i}:run`, label: `↳ ${c.callId}`.slice(0, 11), indent },
      { key: `c${i}:model`, label: 'model', indent: indent + 1 },
      ...Array.from({ length: c.model.toolLanes }, (_, j) => ({
        key: `c${i}:tool${j}`,
        label: j === 0 ? 'tools' : '',
        indent: indent + 1,
      })),
    );
    for (const s of childSpans(c)) placed.push({ span: s, key: `c${i}:${s.row === 'tool' ? `tool${s.lane ?? 0}` : s.row}` });
  });
  const yOf = new Map(rows.map((r, i) => [r.key, TOP + i * ROW]));
  const marksY = TOP + rows.length * ROW + 16;
  const height = marksY + MARK_ROW;
  const svgWidth = Math.ceil(axis.right + 140);
  const out: string[] = [
    `<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="${svgWidth}" height="${height}" viewBox="0 0 ${svgWidth} ${height}">`,
    defs,
  ];
  out.push(ticks(axis, height - 8));
  rows.forEach((r, i) => {
    const y = TOP + i * ROW;
    out.push(
      `<line class="rowline" x1="0" x2="${svgWidth}" y1="${y + ROW - 2}" y2="${y + ROW - 2}"/>` +
        `<text class="rowlabel${r.indent ? ' child' : ''}" x="${10 + (r.indent ?? 0) * 8}" y="${y + 13}">${escapeHtml(r.label)}</text>`,
    );
  });
  out.push(`<text class="rowlabel" x="10" y="${marksY + 4}">events</text>`);
  for (const m of model.marks.filter((k) => k.kind === 'attach')) {
    const x = axis.at(m.at).toFixed(1);
    out.push(`<line class="restart" x1="${x}" x2="${x}" y1="${TOP - 4}" y2="${marksY}"/>`);
  }
  const order = { run: 0, attempt: 1, step: 2, model: 3, tool: 4 } as const;
  for (const { span: s, key } of placed.sort((a, b) => order[a.span.row] - order[b.span.row] || a.span.start - b.span.start))
    out.push(bar(s, axis.at(s.start), axis.at(s.end), yOf.get(key)! + 2));
  let lastX = -Infinity;
  let level = 0;
  for (const m of [...model.marks].sort((a, b) => a.at - b.at)) {
    const x = axis.at(m.at);
    level = x - lastX < 90 ? (level + 1) % 3 : 0;
    lastX = x;
    out.push(mark(m, x, marksY, level));
  }
  out.push('</svg>');
  return out.join('\n');
}

const LEGEND: [string, string][] = [
  ['bar run status-succeeded', 'run'],
  ['bar attempt interrupted', 'interrupted attempt'],
  ['bar model', 'model call'],
  ['bar tool outcome-completed', 'tool: completed'],
  ['bar tool error', 'tool: error'],
  ['bar tool cancelled', 'tool: cancelled'],
  ['bar tool uncertain', 'tool: uncertain / no result'],
  ['bar tool outcome-skipped', 'tool: skipped'],
];

const TimelineOptionsSchema = z.strictObject({
  sessionId: z.string().min(1),
  generatedAt: z.date().optional(),
  width: z.number().int().positive().optional(),
  children: z.array(ChildTimelineSchema).optional(),
  childView: z.strictObject({ command: z.string().min(1), flag: z.string() }).optional(),
});

/** The child sessions listed under the chart: call, session id, status, answer, and the command that draws each. */
function childList(children: readonly ChildLanes[], view: TimelineOptions['childView']): string {
  if (children.length === 0) return '';
  const viewOf = (id: string) => [view?.command ?? 'actorloop view', quote(id), ...(view?.flag ? [view.flag] : [])].join(' ');
  const rows = children.map(
    (c) =>
      `<tr class="child-session"><td style="padding-left:${(c.depth - 1) * 18 + 6}px">${'↳'.repeat(c.depth)} ${escapeHtml(c.callId)}</td>` +
      `<td><code>${escapeHtml(c.sessionId)}</code></td><td class="status-${escapeHtml(c.status)}">${escapeHtml(c.status)}</td>` +
      `<td>${escapeHtml((c.answer ?? '').slice(0, 300))}</td><td><code>${escapeHtml(viewOf(c.sessionId))}</code></td></tr>`,
  );
  return (
    `<section class="children"><h2>Child sessions (agent calls)</h2><table class="events">` +
    `<thead><tr><th>call</th><th>session</th><th>status</th><th>answer</th><th>its own page</th></tr></thead>` +
    `<tbody>\n${rows.join('\n')}\n</tbody></table></section>`
  );
}

/** The page loads nothing: its own inline style and script, and data: images (a model's pictures). */
const TIMELINE_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

/**
 * Renders a session's events as one self-contained HTML page (inline CSS, SVG and script; no
 * network): runs, attempts, steps, model calls and tool calls as bars on a time axis whose idle
 * gaps are collapsed, approvals, compactions, finals, deliveries and restarts as marks, and the
 * event list. Hovering shows a summary; clicking shows the events' payloads. `children` (the child
 * sessions of its agentTool calls, `readChildTimelines`) are drawn in rows under the session's
 * own, on the same time axis, and listed with their status and answer.
 * @example
 * writeFileSync('s1.html', renderTimeline(events, { sessionId: 's1' }))
 */
export function renderTimeline(events: readonly EventRecord[], options: TimelineOptions): string {
  events = parseInput(z.array(EventRecord), events, 'renderTimeline: events');
  options = parseInput(TimelineOptionsSchema, options, 'renderTimeline: options');
  const model = buildTimeline(options.sessionId, events);
  const children = childLanes(options.children ?? []);
  const runs = model.spans.filter((s) => s.row === 'run');
  const tools = model.spans.filter((s) => s.row === 'tool');
  const uncertain = tools.filter((s) => s.classes.includes('uncertain')).length;
  const attaches = model.marks.filter((m) => m.kind === 'attach').length;
  const meta = [
    `<b>${events.length}</b> events`,
    `<b>${runs.length}</b> run${runs.length === 1 ? '' : 's'}`,
    `<b>${tools.length}</b> tool call${tools.length === 1 ? '' : 's'}${uncertain ? ` (<b>${uncertain}</b> uncertain)` : ''}`,
    `<b>${attaches}</b> writer attach${attaches === 1 ? '' : 'es'}`,
    ...(children.length ? [`<b>${children.length}</b> child session${children.length === 1 ? '' : 's'}`] : []),
    events.length ? `${escapeHtml(events[0]!.occurredAt)} → ${escapeHtml(events[events.length - 1]!.occurredAt)}` : 'empty log',
  ].join(' · ');
  const legend = LEGEND.map(
    ([cls, label]) =>
      `<span><svg viewBox="0 0 22 12"><g class="${cls}"><rect x="1" y="1" width="20" height="10" rx="2"/></g></svg>` +
      `${escapeHtml(label)}</span>`,
  ).join('');
  const rows = events
    .map(
      (e) =>
        `<tr id="ev-${e.seq}" data-seqs="${e.seq}" data-title="${escapeHtml(`#${e.seq} ${e.type}`)}">` +
        `<td class="num">${e.seq}</td><td>${escapeHtml(e.occurredAt.slice(11, 23))}</td>` +
        `<td>${e.turn ? `${e.turn}.${e.step}.${e.attempt}` : ''}</td><td class="type">${escapeHtml(e.type)}</td>` +
        `<td>${escapeHtml(summarize(e))}</td></tr>`,
    )
    .join('\n');
  const generated = (options.generatedAt ?? new Date()).toISOString();
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="${TIMELINE_CSP}">
<title>actorloop · session ${escapeHtml(options.sessionId)}</title>
<style>${TIMELINE_CSS}</style>
</head>
<body>
<header>
<h1>actorloop session <code>${escapeHtml(options.sessionId)}</code></h1>
<p class="meta">${meta} · generated ${escapeHtml(generated)}</p>
</header>
<div class="legend">${legend}
<span><svg viewBox="0 0 22 12"><g class="mark attach">
<circle class="shape" cx="11" cy="6" r="5"/></g></svg>writer attached (start / restart)</span></div>
<div class="chart-wrap">
${svgOf(model, options.width ?? 1100, children)}
</div>
${childList(children, options.childView)}
<div id="tooltip" hidden></div>
<main class="lower">
<aside id="detail"><p class="hint">Click a bar, a mark or a row to see its events' payloads.</p></aside>
<table class="events"><thead><tr><th>seq</th><th>time (UTC)</th><th>t.s.a</th><th>type</th><th>summary</th></tr></thead>
<tbody>
${rows}
</tbody></table>
</main>
<script type="application/json" id="event-data">${scriptJson(events)}</script>
<script>${TIMELINE_JS}</script>
</body>
</html>
`;
}
