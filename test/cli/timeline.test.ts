import { describe, expect, it } from 'vitest';
import { EventPayloads, EventRecord } from '../../src/contracts/events.js';
import { buildTimeline } from '../../src/cli/timeline-model.js';
import { escapeHtml, formatDuration, makeAxis, renderTimeline, scriptJson } from '../../src/cli/timeline.js';
import { readChildTimelines } from '../../src/cli/timeline-children.js';
import { memoryStore } from '../../src/index.js';
import { logOf } from '../helpers/runtime.js';
import { runAgentTree } from '../helpers/agent-tree.js';
import { fixtureSession } from './timeline-fixture.js';

describe('the timeline model', () => {
  const events = fixtureSession();

  it('draws from a fixture that passes the log schemas', () => {
    for (const e of events) {
      expect(EventRecord.safeParse(e).success, `#${e.seq}`).toBe(true);
      expect(EventPayloads[e.type].safeParse(e.payload).success, `#${e.seq} ${e.type}`).toBe(true);
    }
  });

  it('has one bar per run, attempt, step and tool call, classed by status and outcome', () => {
    const m = buildTimeline('fixture', events);
    const rows = (row: string) => m.spans.filter((s) => s.row === row);
    expect(rows('run').map((s) => s.classes)).toEqual([['status-succeeded'], ['status-delivery_unknown'], ['status-interrupted', 'open']]);
    expect(rows('attempt').map((s) => s.label)).toEqual([
      'prompt #1 · succeeded',
      'prompt #1 · suspended',
      'respond #2 · delivery_unknown',
      'prompt #1 · interrupted',
    ]);
    expect(rows('step')).toHaveLength(7);
    const tools = Object.fromEntries(rows('tool').map((s) => [s.label.replace(' ?', ''), s.classes]));
    expect(tools).toEqual({
      calculate: ['mode-parallel', 'outcome-completed'],
      read_file: ['mode-parallel', 'outcome-completed', 'error'],
      deploy: ['mode-exclusive', 'outcome-uncertain-hanging', 'uncertain'],
      pay: ['mode-exclusive', 'outcome-cancelled', 'cancelled'],
      migrate: ['mode-exclusive', 'outcome-unresolved', 'uncertain'],
    });
    // the two parallel calls overlap: they get two lanes
    expect(m.toolLanes).toBe(2);
  });

  it('times a tool call by its startedAt/endedAt and a model call by its latency', () => {
    const m = buildTimeline('fixture', events);
    const t = (ms: number) => Date.parse('2026-01-05T10:00:00.000Z') + ms;
    const calc = m.spans.find((s) => s.label === 'calculate')!;
    expect([calc.start, calc.end]).toEqual([t(405), t(650)]);
    const firstModel = m.spans.find((s) => s.row === 'model')!;
    expect([firstModel.start, firstModel.end]).toEqual([t(20), t(400)]);
    // an unresolved call runs to the last event its attempt wrote
    const migrate = m.spans.find((s) => s.label === 'migrate ?')!;
    expect(migrate.end).toBe(migrate.start);
  });

  it('marks approvals, compactions, finals, deliveries and writer attaches', () => {
    const kinds = buildTimeline('fixture', events).marks.map((k) => `${k.kind}${k.classes.includes('unknown') ? ':unknown' : ''}`);
    expect(kinds).toEqual([
      'attach',
      'final',
      'delivery',
      'approval',
      'approval',
      'attach',
      'approval',
      'compaction',
      'final',
      'delivery:unknown',
    ]);
  });
});

describe('the timeline page', () => {
  it('is self-contained: no external URL, a CSP that forbids the network', () => {
    const html = renderTimeline(fixtureSession(), { sessionId: 'fixture', generatedAt: new Date(0) });
    expect(html).toContain(`default-src 'none'`);
    expect(html.match(/(?:src|href)\s*=\s*["']?(?:https?:)?\/\//gi)).toBeNull();
    expect(html).not.toMatch(/@import|url\(["']?http/);
  });

  it('escapes text from the log: a payload cannot close the script or inject markup', () => {
    const html = renderTimeline(fixtureSession(), { sessionId: 'a<b>"c', generatedAt: new Date(0) });
    expect(html.split('</script>')).toHaveLength(3); // the two real script elements only
    expect(html).not.toContain('<b>x</b>');
    expect(html).toContain('actorloop session <code>a&lt;b&gt;&quot;c</code>');
    expect(scriptJson({ s: '</script>\u2028' })).toBe('{"s":"\\u003c/script>\\u2028"}');
    expect(escapeHtml(`<a href="x">'&'</a>`)).toBe('&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
  });

  it('collapses idle gaps: an hour between two bursts takes a fixed width', () => {
    const axis = makeAxis(
      [
        [0, 1000],
        [3_601_000, 3_602_000],
      ],
      1000,
    );
    expect(axis.gaps).toHaveLength(1);
    expect(axis.gaps[0]!.ms).toBe(3_600_000);
    expect(axis.at(3_602_000) - axis.at(0)).toBeLessThan(1200);
    expect(axis.at(500)).toBeLessThan(axis.at(3_601_000));
    expect(formatDuration(3_600_000)).toBe('1 h 0 min');
    expect(formatDuration(3_599_700)).toBe('1 h 0 min');
    expect(formatDuration(59_990)).toBe('1 min 0 s');
    expect(formatDuration(1_234)).toBe('1.2 s');
    // the fixture's hour between the suspension and the respond is one break in the page
    const html = renderTimeline(fixtureSession(), { sessionId: 'fixture' });
    expect(html.match(/class="gap"/g)).toHaveLength(2);
    expect(html).toContain('⋯ 1 h 0 min');
  });

  it('renders an empty log', () => {
    const html = renderTimeline([], { sessionId: 'empty' });
    expect(html).toContain('empty log');
    expect(html).toContain('<svg');
  });

  it("draws each child session's runs, model and tool calls in rows under its parent's, on the parent's axis, and lists it with its status and answer", async () => {
    const store = memoryStore();
    const close = await runAgentTree(store);
    const events = await logOf(store, 's');
    const children = await readChildTimelines(store, 's', events);
    await close();
    expect(children.map((c) => [c.callId, c.sessionId, c.children?.map((g) => g.sessionId)])).toEqual([
      ['c1', 's/r/1/c1', ['s/r/1/c1/answer/1/k1']],
    ]);
    const html = renderTimeline(events, { sessionId: 's', children, generatedAt: new Date(0) });
    expect(html).toContain('<b>2</b> child sessions');
    expect(html).toContain('>↳ c1</text>');
    expect(html).toContain('>↳ k1</text>');
    // the list: each child with its status and answer, the grandchild indented under it
    const listed = [...html.matchAll(/<tr class="child-session">(.*?)<\/tr>/g)].map((m) => m[1]!.replace(/<[^>]+>/g, '|'));
    expect(listed).toHaveLength(2);
    expect(listed[0]).toMatch(/↳ c1\|+s\/r\/1\/c1\|+succeeded\|+tea is hot\|/);
    expect(listed[1]).toMatch(/↳↳ k1\|+s\/r\/1\/c1\/answer\/1\/k1\|+succeeded\|+checked: hot\|/);
    // the call's bar names its child; the child's model calls lie within it on the shared axis
    const rect = (cls: RegExp) =>
      [...html.matchAll(/<g class="bar ([^"]*)"[^>]*data-title="([^"]*)"[^>]*><rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"/g)]
        .filter((m) => cls.test(m[1]!))
        .map((m) => ({ title: m[2]!, x0: Number(m[3]), x1: Number(m[3]) + Number(m[4]) }));
    const [call] = rect(/^tool .*agent-call/).filter((b) => b.title.startsWith('researcher'));
    expect(call!.title).toContain('(child session s/r/1/c1)');
    const childModels = rect(/^model .*child/).filter((b) => b.title.startsWith('child session s/r/1/c1 '));
    expect(childModels).toHaveLength(2);
    for (const m of childModels) {
      expect(m.x0).toBeGreaterThanOrEqual(call!.x0 - 0.5);
      expect(m.x0).toBeLessThanOrEqual(call!.x1 + 0.5);
    }
  });
});
