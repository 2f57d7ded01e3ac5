/** The timeline page's inline stylesheet (no external fonts or files). */
export const TIMELINE_CSS = `
:root { --fg: #1d2330; --muted: #697386; --line: #d9dee7; --bg: #fbfcfe; --panel: #fff;
  --ok: #3f9b5a; --err: #d64545; --warn: #e08a1e; --unc: #a33fb8; --run: #4a6fa5; --step: #8a9bb8; --model: #7b61c9; }
* { box-sizing: border-box; }
body { margin: 0; font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { padding: 14px 20px 6px; }
h1 { font-size: 17px; margin: 0 0 2px; font-weight: 600; }
h1 code { font-size: 16px; }
.meta { color: var(--muted); margin: 0; }
.meta b { color: var(--fg); font-weight: 600; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 14px; padding: 6px 20px 10px; color: var(--muted); font-size: 12px; }
.legend span { display: inline-flex; align-items: center; gap: 5px; }
.legend svg { width: 22px; height: 12px; }
.chart-wrap { overflow-x: auto; border-top: 1px solid var(--line); border-bottom: 1px solid var(--line); background: var(--panel); }
svg.timeline { display: block; font-size: 11px; }
.rowlabel { fill: var(--muted); font-size: 11px; }
.rowlabel.child { font-style: italic; }
.bar.child rect { opacity: 0.85; }
section.children { margin: 10px 0; } section.children h2 { font-size: 14px; margin: 4px 0; }
.rowline { stroke: #eef1f5; }
.tick, .rowline, .restart { pointer-events: none; }
.tick line { stroke: #e6e9ef; }
.tick text { fill: var(--muted); font-size: 10px; }
.clock { fill: var(--fg); font-size: 10px; font-weight: 600; }
.gap { pointer-events: none; }
.gap rect { fill: url(#gap-hatch); }
.gap text { fill: var(--muted); font-size: 10px; }
.bar { cursor: pointer; }
.bar rect { stroke-width: 1; rx: 3; }
.bar text { fill: #fff; font-size: 10.5px; pointer-events: none; }
.bar.run rect { fill: var(--run); stroke: #36507a; }
.bar.run.status-failed rect, .bar.attempt.status-failed rect { fill: var(--err); stroke: #a12f2f; }
.bar.run.status-cancelled rect, .bar.attempt.status-cancelled rect { fill: var(--warn); stroke: #a86512; }
.bar.run.open rect { fill: url(#open-hatch); stroke: var(--run); stroke-dasharray: 4 2; }
.bar.run.open text { fill: var(--fg); }
.bar.attempt rect { fill: #9fb3d4; stroke: #6f87b0; }
.bar.attempt.interrupted rect { fill: url(#interrupted-hatch); stroke: var(--err); stroke-width: 1.5; stroke-dasharray: 4 2; }
.bar.attempt text, .bar.step text { fill: var(--fg); }
.bar.step rect { fill: #dfe5ef; stroke: var(--step); }
.bar.step.open rect { stroke-dasharray: 3 2; }
.bar.model rect { fill: var(--model); stroke: #5a45a0; }
.bar.model.failed rect { fill: #f3c5c5; stroke: var(--err); }
.bar.model.failed text { fill: var(--err); }
.bar.tool rect { fill: var(--ok); stroke: #2d7443; }
.bar.tool.error rect { fill: var(--err); stroke: #a12f2f; }
.bar.tool.outcome-skipped rect { fill: #cfd5df; stroke: #9aa4b5; }
.bar.tool.outcome-skipped text { fill: var(--fg); }
.bar.tool.cancelled rect { fill: url(#cancel-hatch); stroke: var(--warn); stroke-width: 2; }
.bar.tool.cancelled text { fill: #7a4408; font-weight: 600; }
.bar.tool.uncertain rect { fill: url(#uncertain-hatch); stroke: var(--unc); stroke-width: 2.5; }
.bar.tool.uncertain text { fill: #5e1a6e; font-weight: 700; }
.bar.tool.outcome-unresolved rect { stroke-dasharray: 5 3; }
.bar:hover rect, .mark:hover .shape { filter: brightness(1.1); stroke: #111; }
.bar.selected rect, .mark.selected .shape { stroke: #111; stroke-width: 2.5; }
.mark { cursor: pointer; }
.mark .shape { stroke: #fff; stroke-width: 1; }
.mark text { font-size: 10px; fill: var(--muted); }
.mark.attach .shape { fill: #556070; }
.mark.approval .shape { fill: var(--warn); }
.mark.compaction .shape { fill: #2b8a9a; }
.mark.final .shape { fill: var(--model); }
.mark.delivery .shape { fill: var(--ok); }
.mark.delivery.unknown .shape { fill: var(--err); }
.mark.delivery.unknown text { fill: var(--err); font-weight: 600; }
.mark.cancel .shape, .mark.problem .shape { fill: var(--err); }
.mark.steering .shape, .mark.input .shape { fill: #6b7a90; }
.restart { stroke: #556070; stroke-dasharray: 2 3; }
.lower { display: grid; grid-template-columns: minmax(320px, 44%) 1fr; gap: 16px; padding: 14px 20px 30px; align-items: start; }
#detail { position: sticky; top: 10px; background: var(--panel); border: 1px solid var(--line); border-radius: 6px;
  padding: 10px 12px; max-height: 90vh; overflow: auto; }
#detail h2 { font-size: 13px; margin: 0 0 6px; }
#detail .ev { border-top: 1px solid var(--line); padding-top: 6px; margin-top: 6px; }
#detail .ev:first-of-type { border-top: 0; margin-top: 0; }
#detail .head { font-weight: 600; }
#detail .head small { color: var(--muted); font-weight: 400; }
pre.payload { margin: 4px 0 0; padding: 8px; background: #f4f6fa; border-radius: 4px;
  font: 11.5px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap; word-break: break-word; }
.hint { color: var(--muted); margin: 0; }
table.events { width: 100%; border-collapse: collapse; font-size: 12px; background: var(--panel); }
table.events th { text-align: left; color: var(--muted); font-weight: 500; border-bottom: 1px solid var(--line); padding: 4px 6px;
  position: sticky; top: 0; background: var(--panel); }
table.events td { padding: 3px 6px; border-bottom: 1px solid #f0f2f6; vertical-align: top; }
table.events td.num { text-align: right; color: var(--muted); font-variant-numeric: tabular-nums; }
table.events td.type { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; white-space: nowrap; }
table.events tr { cursor: pointer; }
table.events tr:hover td { background: #f4f7fc; }
table.events tr.selected td { background: #fff3d6; }
#tooltip { position: fixed; z-index: 10; max-width: 460px; padding: 6px 8px; border-radius: 4px; background: #1d2330; color: #fff;
  font-size: 12px; pointer-events: none; white-space: pre-wrap; }
`;

/**
 * The page's inline script: a tooltip on hover, and on click (or Enter) the payloads of the
 * clicked element's events in #detail, with their rows highlighted in the event table.
 */
export const TIMELINE_JS = `
(function () {
  var data = JSON.parse(document.getElementById('event-data').textContent);
  var bySeq = new Map(data.map(function (e) { return [e.seq, e]; }));
  var tip = document.getElementById('tooltip');
  var detail = document.getElementById('detail');
  function target(ev) { return ev.target && ev.target.closest ? ev.target.closest('[data-seqs]') : null; }
  function seqsOf(el) { return el.getAttribute('data-seqs').split(',').filter(Boolean).map(Number); }
  function place(ev) {
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 470) + 'px';
    tip.style.top = (ev.clientY + 16) + 'px';
  }
  document.addEventListener('mouseover', function (ev) {
    var el = target(ev);
    if (!el || !el.getAttribute('data-title')) { tip.hidden = true; return; }
    tip.textContent = el.getAttribute('data-title');
    tip.hidden = false;
    place(ev);
  });
  document.addEventListener('mousemove', function (ev) { if (!tip.hidden) place(ev); });
  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined) n.textContent = text;
    return n;
  }
  function select(node) {
    document.querySelectorAll('.selected').forEach(function (x) { x.classList.remove('selected'); });
    node.classList.add('selected');
    var seqs = seqsOf(node);
    detail.replaceChildren();
    detail.appendChild(el('h2', '', node.getAttribute('data-title') || ('seq ' + seqs.join(', '))));
    seqs.forEach(function (seq) {
      var e = bySeq.get(seq);
      if (!e) return;
      var box = el('div', 'ev');
      box.setAttribute('data-seq', String(seq));
      var head = el('div', 'head', '#' + e.seq + ' ' + e.type + ' ');
      var at = 'turn ' + e.turn + ', step ' + e.step + ', attempt ' + e.attempt;
      head.appendChild(el('small', '', at + ' · ' + e.occurredAt + ' · ' + e.eventId));
      box.appendChild(head);
      box.appendChild(el('pre', 'payload', JSON.stringify(e.payload, null, 2)));
      detail.appendChild(box);
      var row = document.getElementById('ev-' + seq);
      if (row) row.classList.add('selected');
    });
  }
  document.addEventListener('click', function (ev) { var n = target(ev); if (n) select(n); });
  document.addEventListener('keydown', function (ev) {
    if (ev.key !== 'Enter' && ev.key !== ' ') return;
    var n = target(ev);
    if (n) { ev.preventDefault(); select(n); }
  });
})();
`;
