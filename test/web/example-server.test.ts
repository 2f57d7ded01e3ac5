import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { REPO_ROOT, killAllChildren, spawnTs } from '../crash/child-util.js';
import { tempDir } from '../helpers/tmp.js';
import { SseReader } from './sse-reader.js';

const dir = tempDir('actorloop-web-example-');
afterEach(() => killAllChildren());
afterAll(() => dir.cleanup());

describe('examples/web/server.ts', () => {
  it('serves the page, its client and the endpoints; a posted message runs to the approval', async () => {
    const port = await new Promise<number>((res) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => res(p));
      });
    });
    const child = spawnTs(join(REPO_ROOT, 'examples/web/server.ts'), [dir.path, String(port)], { label: 'web example' });
    await child.waitFor((l) => l.startsWith('listening '), 30_000, 'listening');
    const base = `http://127.0.0.1:${port}`;
    expect(await (await fetch(`${base}/`)).text()).toContain('<script type="module" src="./app.js">');
    expect(await (await fetch(`${base}/client.js`)).text()).toContain('Last-Event-ID'.toLowerCase());
    const res = await fetch(`${base}/sessions/ex1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ inputId: 'i1', message: 'deploy' }),
    });
    expect(res.status).toBe(202);
    const stream = new SseReader(await fetch(`${base}/sessions/ex1/events`));
    await stream.until((x) => x.committed().some((f) => f.record.type === 'approval/requested'), 30_000, 'the approval');
    await stream.cancel();
  });
});
