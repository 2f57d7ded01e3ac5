import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lmdbStore } from '../../src/index.js';
import { REPO_ROOT, killAllChildren, spawnTs, type ChildRun } from '../crash/child-util.js';
import { scaled } from '../helpers/load.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * The example chat page (`actorloop web`) in headless Chromium, against real server processes
 * that are SIGKILLed and started again on the same data dir and port. Without /usr/bin/chromium
 * the suite is skipped, except in CI, where it fails. ACTORLOOP_WEB_PNG=docs/web.png also saves
 * a screenshot of the page after a restart.
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
if (!available && !inCi) console.warn(`web browser tests skipped: ${CHROMIUM} not found (apt-get install chromium)`);

describe.runIf(!available && inCi)('the chat page in Chromium, in CI', () => {
  it('has Chromium installed', () => {
    throw new Error(`${CHROMIUM} is missing: .ci/run should have installed Debian's chromium`);
  });
});

const MAIN = join(REPO_ROOT, 'src/cli/main.ts');
const freePort = () =>
  new Promise<number>((res) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });

describe.skipIf(!available)(`the chat page in headless Chromium (${CHROMIUM})`, () => {
  let browser: Browser;
  let port: number;
  let server: ChildRun;
  const dir = tempDir('actorloop-web-');

  const startServer = async () => {
    process.env.ACTORLOOP_DEMO_PACE = '0.4';
    server = spawnTs(MAIN, ['web', '--port', String(port), '--data', dir.path, '--lease-ms', '1500'], { label: 'actorloop web' });
    await server.waitFor((l) => l.startsWith('listening '), 30_000, 'the server to listen');
  };
  const killServer = async () => {
    server.signal('SIGKILL');
    const exit = await server.exited;
    expect(exit.signal).toBe('SIGKILL');
  };
  const openPage = async (session: string): Promise<Page> => {
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } });
    await page.goto(`http://127.0.0.1:${port}/?session=${session}`);
    await page.locator('#conn.open').waitFor({ timeout: scaled(20_000) });
    return page;
  };
  const send = async (page: Page) => page.getByRole('button', { name: 'Send' }).click();
  const approve = async (page: Page) => page.getByRole('button', { name: 'Approve' }).click({ timeout: scaled(30_000) });
  const finalShown = (page: Page) =>
    page
      .locator('.item.final')
      .first()
      .waitFor({ timeout: scaled(60_000) });
  /** The seqs the page received, in order (each committed frame appends one row, never deduplicated). */
  const pageSeqs = (page: Page) =>
    page.locator('#log li').evaluateAll((lis) => lis.map((li) => Number((li as unknown as { dataset: { seq: string } }).dataset.seq)));
  async function logSeqs(session: string): Promise<number[]> {
    const store = lmdbStore({ path: dir.path });
    try {
      const seqs: number[] = [];
      for await (const r of store.readEvents(session)) seqs.push(r.seq);
      return seqs;
    } finally {
      await store.close();
    }
  }
  /** The page has every record of the log exactly once, in order, once the run has ended. */
  async function expectWholeLog(page: Page, session: string) {
    await page.locator('.run', { hasText: 'run ended: succeeded' }).waitFor({ timeout: scaled(60_000) });
    const expected = await logSeqs(session);
    const deadline = Date.now() + scaled(10_000);
    while ((await pageSeqs(page)).length < expected.length && Date.now() < deadline) await page.waitForTimeout(100);
    expect(await pageSeqs(page)).toEqual(expected);
    expect(await page.locator('.item.final').count()).toBe(1);
  }

  beforeAll(async () => {
    port = await freePort();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
    await startServer();
  }, scaled(60_000));
  afterAll(async () => {
    await browser?.close();
    await killAllChildren();
    await dir.cleanup();
  });

  it(
    'shows a full run: streamed text, tool calls with progress, the deploy approved with its button, the final answer; a second tab opened later shows the same history from the log',
    async () => {
      const page = await openPage('full');
      await send(page);
      await page.locator('.item.approval button.approve').waitFor({ timeout: scaled(30_000) });
      expect(await page.locator('.item.tool.done').count()).toBe(4); // two reads and two calculations
      expect(await page.locator('.item.user').count()).toBe(1);
      await approve(page);
      await page
        .locator('.item.tool .progress')
        .first()
        .waitFor({ timeout: scaled(20_000) }); // the deploy's phases
      await finalShown(page);
      await expectWholeLog(page, 'full');
      expect(await page.evaluate(() => (globalThis as { __sawLiveText?: boolean }).__sawLiveText)).toBe(true);
      expect(await page.locator('.item.tool.done').count()).toBe(5);
      expect(await page.locator('.item.final').innerText()).toContain('deployed checkout 2.4.0 to staging');

      const later = await openPage('full');
      await expectWholeLog(later, 'full');
      expect(await later.locator('#items').innerText()).toBe(await page.locator('#items').innerText());
      await page.close();
      await later.close();
    },
    scaled(120_000),
  );

  it(
    'a short session: the header keeps its one line, a waiting approval is not "run ended", a reload leaves the prompt box empty, the session list switches sessions, the favicon is served',
    async () => {
      const page = await openPage('short');
      const header = async () => (await page.locator('header').boundingBox())!.height;
      expect(await header()).toBeLessThan(80); // no row of its own: it shared the height with an empty chat
      expect(await page.locator('#prompt').inputValue()).not.toBe(''); // a new session is offered the demo prompt
      await send(page);
      await page.locator('.item.approval button.approve').waitFor({ timeout: scaled(30_000) });
      await page.waitForTimeout(300); // the run/suspended and run/end records that follow the approval
      expect(await page.locator('#items').innerText()).not.toContain('suspended');
      await page.locator('.run.waiting', { hasText: 'waiting for approval' }).waitFor({ timeout: scaled(10_000) });
      expect(await header()).toBeLessThan(80);
      await page.reload();
      await page.locator('#conn.open').waitFor({ timeout: scaled(20_000) });
      await page.locator('.item.user').waitFor({ timeout: scaled(10_000) });
      expect(await page.locator('#prompt').inputValue()).toBe(''); // Send would not repeat the prompt
      // the session list: this session among those of the store, and choosing another opens it
      const listed = await page.locator('#sessions option').evaluateAll((os) => os.map((o) => (o as unknown as { value: string }).value));
      expect(listed).toEqual(expect.arrayContaining(['short', 'full', '']));
      expect(await page.locator('#sessions').inputValue()).toBe('short');
      await page.locator('#sessions').selectOption('full');
      await page.waitForURL(/\?session=full$/, { timeout: scaled(10_000) });
      await page.locator('.item.final').waitFor({ timeout: scaled(20_000) });
      const icon = await page.locator('link[rel=icon]').getAttribute('href');
      for (const path of [icon!, '/favicon.ico']) {
        const res = await page.request.get(new URL(path, page.url()).href);
        expect(res.status(), path).toBe(200);
        expect(res.headers()['content-type']).toMatch(/^image\//);
      }
      await page.close();
    },
    scaled(90_000),
  );

  it(
    'the server is SIGKILLed mid-deploy and started again: the page reconnects by itself and ends with every committed event once and the final answer once',
    async () => {
      const page = await openPage('killed');
      await send(page);
      await approve(page);
      await page
        .locator('.item.tool .progress')
        .first()
        .waitFor({ timeout: scaled(20_000) });
      await killServer();
      await page.locator('#conn.reconnecting').waitFor({ timeout: scaled(20_000) });
      await startServer();
      await page.locator('.marker.resumed').waitFor({ timeout: scaled(30_000) }); // the run resumed in the new process
      // a deploy cut off before it took effect is reconciled as not done and the agent deploys
      // again, which needs approval again (unless the kill came after the deploy had finished)
      const final = page.locator('.item.final');
      const again = page.locator('.item.approval button.approve');
      await final
        .or(again)
        .first()
        .waitFor({ timeout: scaled(60_000) });
      if ((await final.count()) === 0) await approve(page);
      await finalShown(page);
      await expectWholeLog(page, 'killed');
      expect(await page.locator('#conn').innerText()).toMatch(/reconnected/);
      if (process.env.ACTORLOOP_WEB_PNG) await page.screenshot({ path: join(REPO_ROOT, process.env.ACTORLOOP_WEB_PNG) });
      await page.close();
    },
    scaled(150_000),
  );

  it(
    'an approval clicked in the page resumes a run suspended in an earlier server process',
    async () => {
      const page = await openPage('suspended');
      await send(page);
      await page.locator('.item.approval button.approve').waitFor({ timeout: scaled(30_000) });
      await killServer();
      await startServer();
      await page.locator('#conn.open', { hasText: 'reconnected' }).waitFor({ timeout: scaled(20_000) });
      await approve(page);
      await finalShown(page);
      await expectWholeLog(page, 'suspended');
      const store = lmdbStore({ path: dir.path });
      let asked = 0;
      let answered = 0;
      for await (const r of store.readEvents('suspended')) {
        if (r.type === 'approval/requested') asked = r.writerEpoch;
        if (r.type === 'run/start' && r.payload.kind === 'respond') answered = r.writerEpoch;
      }
      await store.close();
      expect(answered).toBeGreaterThan(asked); // the respond ran under a writer the new process attached
      await page.close();
    },
    scaled(150_000),
  );
});
