import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, describe, expect, it } from 'vitest';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { scaled } from '../helpers/load.js';

/**
 * `examples/inspector.ts --serve` in a real browser, offline: Debian's chromium driven by
 * playwright-core, every request outside the example's own 127.0.0.1 server aborted and recorded.
 * Without /usr/bin/chromium the suite is skipped, except in CI, where it fails.
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
if (!available && !inCi) console.warn(`inspector browser test skipped: ${CHROMIUM} not found (apt-get install chromium)`);

describe.runIf(!available && inCi)('the inspector page in Chromium, in CI', () => {
  it('has Chromium installed', () => {
    throw new Error(`${CHROMIUM} is missing: .ci/run should have installed Debian's chromium`);
  });
});

describe.skipIf(!available)(`examples/inspector.ts --serve in headless Chromium (${CHROMIUM})`, () => {
  let browser: Browser | undefined;
  afterAll(async () => {
    await browser?.close();
    await killAllChildren();
  });

  it(
    'a local page shows the session, run and toolBatch state values live as the agent runs, with no request leaving the machine',
    async () => {
      const child = spawnTs('examples/inspector.ts', ['--serve', '--port', '0', '--tool-delay', String(scaled(1500))], {
        label: 'inspector.ts --serve',
      });
      const line = await child.waitFor((l) => l.startsWith('live machines on '), 30_000, 'the page to be served');
      const url = /on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(line)![1]!;

      browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
      const page = await browser.newPage();
      const outside: string[] = [];
      await page.route('**/*', (route) => {
        const u = route.request().url();
        if (u.startsWith(url)) return route.continue();
        outside.push(u);
        return route.abort();
      });
      await page.goto(url);
      const row = (label: string) => page.locator(`#actors tr[data-label="${label}"]`);
      const timeout = scaled(30_000);

      // the run suspended for the approval: the session rests in `suspended`, the first run is done
      await page.locator('#approval').waitFor({ state: 'visible', timeout });
      expect(await page.locator('#approval-text').textContent()).toContain('transfer {"to":"ACME","amount":250} needs approval');
      expect(await row('session').getAttribute('data-state')).toBe('suspended');
      expect(await row('run').getAttribute('data-state')).toBe('done');
      expect(await row('run').locator('td.states').textContent()).toContain('runningTools');
      expect(await row('toolBatch').getAttribute('data-state')).toBe('done');
      expect(await page.locator('iframe').count()).toBe(0);

      await page.locator('#approve').click();
      // while the approved transfer runs (it takes --tool-delay ms) the page shows it, live
      await page.locator('#actors tr[data-label="toolBatch #2"][data-state="runningExclusive"]').waitFor({ timeout });
      expect(await row('session').getAttribute('data-state')).toBe('executing');
      expect(await row('run #2').getAttribute('data-state')).toBe('runningTools');
      // then the answer: the second run ends, the session closes with the runtime
      await page.locator('#actors tr[data-label="session"][data-state="closed"]').waitFor({ timeout });
      expect(await row('run #2').locator('td.states').textContent()).toMatch(
        /verifyingFinal → committingFinal → delivering → ending → done$/,
      );
      await child.waitFor((l) => l.startsWith('outcome: completed'), 30_000, 'the example to report the outcome');
      expect(outside).toEqual([]);
    },
    scaled(120_000),
  );
});
