import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_PROMPT } from '../../src/cli/demo-agent.js';
import { REPO_ROOT, killAllChildren, spawnTs, type ChildRun } from '../crash/child-util.js';
import { scaled } from '../helpers/load.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * `useChat` from `@ai-sdk/react` with its default transport, in headless Chromium, against
 * actorloop's webHandler: a page built with Vite (test/web/use-chat-page) served by a real server
 * process over an LMDB file (test/web/use-chat-server.ts), SIGKILLed mid-run and started again.
 * Skipped without /usr/bin/chromium, except in CI, where it fails.
 */
const CHROMIUM = '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', '--disable-sync'];
const available = existsSync(CHROMIUM);
const inCi = process.env.CI === 'true';

describe.runIf(!available && inCi)('useChat in Chromium, in CI', () => {
  it('has Chromium installed', () => {
    throw new Error(`${CHROMIUM} is missing: .ci/run should have installed Debian's chromium`);
  });
});

const SERVER = join(REPO_ROOT, 'test/web/use-chat-server.ts');
const FINAL = 'deployed checkout 2.4.0 to staging';
const freePort = () =>
  new Promise<number>((res) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });

interface ChatState {
  messages: { id: string; role: string; parts: { type: string; text?: string; state?: string; data?: { content?: string } }[] }[];
  status: string;
}

describe.skipIf(!available)(`useChat (@ai-sdk/react, default transport) against webHandler in Chromium (${CHROMIUM})`, () => {
  let browser: Browser;
  let port: number;
  let server: ChildRun;
  const data = tempDir('actorloop-usechat-');
  const page$ = tempDir('actorloop-usechat-page-');

  const startServer = async () => {
    process.env.ACTORLOOP_DEMO_PACE = '0.4';
    server = spawnTs(SERVER, [data.path, String(port), page$.path], { label: 'use-chat server' });
    await server.waitFor((l) => l.startsWith('listening '), 30_000, 'the server to listen');
  };
  const openPage = async (session: string, page?: Page): Promise<Page> => {
    const p = page ?? (await browser.newPage());
    await p.goto(`http://127.0.0.1:${port}/?session=${session}`);
    await p.locator('#status').waitFor({ timeout: scaled(20_000) });
    return p;
  };
  const state = (page: Page) => page.evaluate(() => (globalThis as unknown as { __chat: ChatState }).__chat);
  const history = async (session: string) =>
    (await fetch(`http://127.0.0.1:${port}/api/chat/${session}/messages`)).json() as Promise<ChatState['messages']>;
  /** The page shows the final answer once, its messages are the history's (no part twice), and the chat is idle. */
  async function expectSettled(page: Page, session: string) {
    await page.locator('.final').waitFor({ timeout: scaled(60_000) });
    await page.locator('#status', { hasText: 'ready' }).waitFor({ timeout: scaled(20_000) });
    expect(await page.locator('.final').count()).toBe(1);
    const { messages } = await state(page);
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(JSON.parse(JSON.stringify(messages))).toEqual(await history(session));
    const texts = messages[1]!.parts.filter((p) => p.type === 'text').map((p) => p.text);
    expect(new Set(texts).size).toBe(texts.length); // no text part repeated
    expect(texts.at(-1)).toContain(FINAL);
    expect((await page.locator('#messages').innerText()).split(FINAL).length - 1).toBe(2); // the last text and the final part
  }

  beforeAll(async () => {
    port = await freePort();
    const { build } = await import('vite');
    await build({
      root: join(REPO_ROOT, 'test/web/use-chat-page'),
      logLevel: 'silent',
      build: { outDir: page$.path, emptyOutDir: true, target: 'es2022', minify: false },
    });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
    await startServer();
  }, scaled(90_000));
  afterAll(async () => {
    await browser?.close();
    await killAllChildren();
    await data.cleanup();
    await page$.cleanup();
  });

  it(
    'a prompt streams to the final answer; a reload mid-run replays the open reply from its user message and ends with the answer once; the history endpoint gives the same messages',
    async () => {
      const page = await openPage('streamed');
      await page.locator('#prompt').fill(DEMO_PROMPT);
      await page.getByRole('button', { name: 'Send' }).click();
      await page
        .locator('.tool')
        .first()
        .waitFor({ timeout: scaled(30_000) }); // early: most of the run is still to come
      expect(await page.locator('.msg.user').count()).toBe(1);
      await page.reload();
      await page.locator('#status').waitFor({ timeout: scaled(20_000) });
      await expectSettled(page, 'streamed');
      // the reply came on the resumed stream (its data parts reached onData), not only from the history
      expect(await page.evaluate(() => (globalThis as unknown as { __data: number }).__data)).toBeGreaterThan(0);
      await page.close();
    },
    scaled(120_000),
  );

  it(
    'the server is SIGKILLed mid-run and started again: with resume the page ends with the final answer exactly once, no duplicated text; a reload shows the history',
    async () => {
      const page = await openPage('killed');
      await page.locator('#prompt').fill(DEMO_PROMPT);
      await page.getByRole('button', { name: 'Send' }).click();
      await page
        .locator('.tool.output-available')
        .nth(1)
        .waitFor({ timeout: scaled(30_000) });
      server.signal('SIGKILL');
      expect((await server.exited).signal).toBe('SIGKILL');
      await page.locator('#status', { hasText: 'error' }).waitFor({ timeout: scaled(20_000) });
      await startServer();
      await expectSettled(page, 'killed');
      expect(await page.evaluate(() => (globalThis as unknown as { __resumes: number }).__resumes)).toBeGreaterThan(0);
      expect(await page.locator('.resumed').count()).toBe(1); // the run went on in the new process

      await page.reload();
      await page.locator('.final').waitFor({ timeout: scaled(20_000) });
      expect(JSON.parse(JSON.stringify((await state(page)).messages))).toEqual(await history('killed'));
      expect(await page.locator('.final').count()).toBe(1);
      await page.close();
    },
    scaled(150_000),
  );
});
