import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderTimeline } from '../../src/cli/timeline.js';
import { lmdbStore } from '../../src/index.js';
import { REPO_ROOT, killAllChildren, spawnTs } from '../crash/child-util.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { fixtureSession } from './timeline-fixture.js';

/**
 * The timeline page in a real browser: Debian's chromium (installed by .ci/run), driven by
 * playwright-core. Without /usr/bin/chromium the suite is skipped, except in CI, where it fails.
 * ACTORLOOP_TIMELINE_PNG=docs/timeline.png also renders a real demo session (killed mid-deploy,
 * then resumed) and saves its screenshot there.
 */
const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-sync',
];
const available = existsSync(CHROMIUM);
const inCi = process.env.CI === 'true';
if (!available && !inCi) console.warn(`timeline browser tests skipped: ${CHROMIUM} not found (apt-get install chromium)`);

describe.runIf(!available && inCi)('the timeline in Chromium, in CI', () => {
  it('has Chromium installed', () => {
    throw new Error(`${CHROMIUM} is missing: .ci/run should have installed Debian's chromium`);
  });
});

describe.skipIf(!available)(`the timeline page in headless Chromium (${CHROMIUM})`, () => {
  let browser: Browser;
  let page: Page;
  const requests: string[] = [];

  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.route('**/*', (route) => {
      requests.push(route.request().url());
      return route.abort();
    });
    await page.setContent(renderTimeline(fixtureSession(), { sessionId: 'fixture', generatedAt: new Date(0) }), { waitUntil: 'load' });
  });
  afterAll(async () => {
    await browser?.close();
    await killAllChildren();
  });

  it('draws a bar per run, attempt, step and tool call, and the marks', async () => {
    expect(await page.locator('svg.timeline .bar.run').count()).toBe(3);
    expect(await page.locator('svg.timeline .bar.attempt').count()).toBe(4);
    expect(await page.locator('svg.timeline .bar.attempt.interrupted').count()).toBe(1);
    expect(await page.locator('svg.timeline .bar.step').count()).toBe(7);
    expect(await page.locator('svg.timeline .bar.model').count()).toBe(6);
    expect(await page.locator('svg.timeline .bar.tool').count()).toBe(5);
    expect(await page.locator('svg.timeline .mark.attach').count()).toBe(2);
    expect(await page.locator('svg.timeline .mark.delivery.unknown').count()).toBe(1);
    expect(await page.locator('svg.timeline .mark.compaction').count()).toBe(1);
    expect(await page.locator('svg.timeline .mark.approval').count()).toBe(3);
    expect(await page.locator('table.events tbody tr').count()).toBe(fixtureSession().length);
    expect(requests).toEqual([]);
  });

  it('makes uncertain and cancelled tool calls stand out', async () => {
    const uncertain = page.locator('svg.timeline .bar.tool.uncertain');
    expect(await uncertain.count()).toBe(2);
    expect(await uncertain.first().getAttribute('class')).toBe('bar tool mode-exclusive outcome-uncertain-hanging uncertain');
    const style = (sel: string, prop: string) =>
      page.evaluate(`getComputedStyle(document.querySelector(${JSON.stringify(`svg.timeline ${sel}`)})).${prop}`);
    expect(await style('.bar.tool.uncertain rect', 'stroke')).toBe('rgb(163, 63, 184)');
    expect(await style('.bar.tool.cancelled rect', 'stroke')).toBe('rgb(224, 138, 30)');
    expect(await style('.bar.tool.outcome-completed:not(.error) rect', 'stroke')).toBe('rgb(45, 116, 67)');
    // the uncertain bar is drawn where its call ran: after the parallel ones, before the final
    const box = async (sel: string) => (await page.locator(sel).first().boundingBox())!;
    const calc = await box('.bar.tool.mode-parallel');
    const deploy = await box('svg.timeline .bar.tool.outcome-uncertain-hanging');
    expect(deploy.x).toBeGreaterThan(calc.x + calc.width - 1);
    expect(deploy.width).toBeGreaterThan(calc.width);
  });

  it('shows a summary on hover and the payloads on click', async () => {
    const deploy = page.locator('svg.timeline .bar.tool.outcome-uncertain-hanging');
    await deploy.hover();
    await expect.poll(() => page.locator('#tooltip').isVisible()).toBe(true);
    expect(await page.locator('#tooltip').textContent()).toContain('deploy d1 [exclusive]');
    await deploy.click();
    const detail = (await page.locator('#detail').textContent()) ?? '';
    expect(detail).toContain('#13 tool/call');
    expect(detail).toContain('#14 tool/result');
    expect(detail).toContain('"kind": "uncertain-hanging"');
    expect(detail).toContain('"env:staging"');
    expect(await page.locator('table.events tr.selected').evaluateAll((rows) => rows.map((r) => r.id))).toEqual(['ev-13', 'ev-14']);
    expect(await deploy.getAttribute('class')).toContain('selected');
    // a mark and a table row are clickable too
    await page.locator('svg.timeline .mark.delivery.unknown .shape').click();
    expect(await page.locator('#detail').textContent()).toContain('the delivery owner threw: offline');
    await page.locator('#ev-3').click();
    expect(await page.locator('#detail pre.payload').textContent()).toContain('Check and deploy <release> & report');
  });

  it.runIf(Boolean(process.env.ACTORLOOP_TIMELINE_PNG))('saves a screenshot of a demo session killed mid-deploy and resumed', async () => {
    const dir = tempDir('actorloop-shot-');
    const demo = (label: string) =>
      spawnTs('src/cli/main.ts', ['demo', '--data', dir.path, '--session', 'demo-1', '--provider', 'scripted'], { label });
    const first = demo('demo (to be killed)');
    await first.waitFor((l) => l.includes('tool start deploy'), 30_000, 'the deploy to start');
    await new Promise((r) => setTimeout(r, 900));
    first.signal('SIGKILL');
    await first.exited;
    const second = demo('demo (resumed)');
    expect((await second.waitExit(60_000)).code, second.describe()).toBe(0);
    const store = lmdbStore({ path: dir.path });
    const events = await collect(store.readEvents('demo-1'));
    await store.close();
    const shot = await browser.newPage({ viewport: { width: 1280, height: 760 } });
    await shot.setContent(renderTimeline(events, { sessionId: 'demo-1', width: 1000 }), { waitUntil: 'load' });
    await shot.locator('svg.timeline .bar.tool.recovered').first().click();
    await shot.mouse.move(0, 0);
    await expect.poll(() => shot.locator('#tooltip').isHidden()).toBe(true);
    await shot.screenshot({ path: join(REPO_ROOT, process.env.ACTORLOOP_TIMELINE_PNG!) });
    await shot.close();
    await dir.cleanup();
  });
});
