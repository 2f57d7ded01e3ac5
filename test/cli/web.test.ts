import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWeb } from '../../src/cli/web.js';
import { tempDir } from '../helpers/tmp.js';

/** One raw HTTP request with the Host header given (a browser on a rebinding page sends its own name). */
function raw(port: number, host: string, method: string, path: string, body?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: '127.0.0.1', port, method, path, headers: { host, ...(body ? { 'content-type': 'application/json' } : {}) } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          text += d;
          if (res.headers['content-type']?.startsWith('text/event-stream')) res.destroy(); // the stream opened: enough
        });
        res.on('close', () => resolve({ status: res.statusCode!, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('actorloop web answers only to its loopback names (DNS rebinding)', () => {
  const dir = tempDir('actorloop-web-hosts-');
  let web: Awaited<ReturnType<typeof startWeb>>;
  let port: number;
  beforeAll(async () => {
    web = await startWeb({ port: 0, data: dir.path, provider: 'scripted', allowedHosts: ['devbox.lan'] }, { write: () => {} });
    port = Number(new URL(web.url).port);
  }, 60_000);
  afterAll(async () => {
    await web?.close();
    await dir.cleanup();
  });

  it('Host: attacker.example is a 403 on the stream, an approval, the page and its script', async () => {
    const answer = JSON.stringify({ entryId: 'a1', questionId: 'q1', answer: { decisions: { c1: 'approve' } } });
    for (const [method, path, body] of [
      ['GET', '/sessions/s1/events'],
      ['POST', '/sessions/s1/respond', answer],
      ['POST', '/sessions/s1/messages', JSON.stringify({ inputId: 'i1', message: 'deploy' })],
      ['GET', '/'],
      ['GET', '/client.js'],
    ] as const) {
      for (const host of ['attacker.example', `attacker.example:${port}`]) {
        const res = await raw(port, host, method, path, body);
        expect(res.status, `${method} ${path} Host ${host}`).toBe(403);
        expect(JSON.parse(res.body).error).toBe('HostNotAllowed');
      }
    }
  });

  it('the loopback names with the bound port, and a name given with --allowed-host, are served', async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, 'devbox.lan', `devbox.lan:${port}`]) {
      expect((await raw(port, host, 'GET', '/')).status, host).toBe(200);
      expect((await raw(port, host, 'GET', '/sessions/s1/events')).status, host).toBe(200);
    }
    expect((await raw(port, `localhost:${port + 1}`, 'GET', '/')).status).toBe(403); // another port is another origin
  });

  it('listens on loopback only: --host 0.0.0.0 is refused', async () => {
    let error: unknown;
    try {
      await startWeb({ port: 0, host: '0.0.0.0', data: dir.path, provider: 'scripted' }, { write: () => {} });
    } catch (e) {
      error = e;
    }
    expect((error as Error)?.message).toMatch(/loopback/);
  });
});

describe('actorloop web options', () => {
  // docs/cli.md: bad values are usage errors (exit 2), worded as `--from: a whole number such as 12 (got "abc")`
  it('a --port or --lease-ms that is not a whole number in range is refused naming the flag and the value', async () => {
    const { runCli } = await import('../../src/cli/program.js');
    for (const [args, expected] of [
      [['--port', 'abc'], 'actorloop: --port: expected a whole number 0–65535 (got "abc")'],
      [['--port', '70000'], 'actorloop: --port: expected a whole number 0–65535 (got "70000")'],
      [['--lease-ms', '5.5'], 'actorloop: --lease-ms: expected a whole number 100–3600000 (got "5.5")'],
    ] as const) {
      const out = { text: '', write: (s: string) => ((out.text += s), true) };
      const err = { text: '', write: (s: string) => ((err.text += s), true) };
      const code = await runCli(['node', 'actorloop', 'web', ...args], {
        out,
        err,
        onInterrupt: () => () => {},
        tty: false,
        env: {},
        exitNow: () => {},
      });
      expect([code, err.text.trim()]).toEqual([2, expected]);
    }
  });

  // docs/cli.md: a bad value names the flag or variable and the value, a database URL's password shown as `***`
  it('a bad --host or ACTORLOOP_DEMO_PACE names the flag or variable and its value, never the database password', async () => {
    const { runCli } = await import('../../src/cli/program.js');
    const url = 'postgres://postgres:s3cret@127.0.0.1:5432/x';
    for (const [args, env, expected] of [
      [['--host', '0.0.0.0', '--postgres', url], {}, /^actorloop: --host: a loopback address .* \(got "0\.0\.0\.0"\)$/],
      [['--host', '0.0.0.0'], { ACTORLOOP_DATABASE_URL: url }, /^actorloop: --host: a loopback address .* \(got "0\.0\.0\.0"\)$/],
      [[], { ACTORLOOP_DEMO_PACE: 'abc' }, /^actorloop: ACTORLOOP_DEMO_PACE: a number from 0 \(no delays\) to 10 \(got "abc"\)$/],
    ] as const) {
      const out = { text: '', write: (s: string) => ((out.text += s), true) };
      const err = { text: '', write: (s: string) => ((err.text += s), true) };
      const code = await runCli(['node', 'actorloop', 'web', ...args], {
        out,
        err,
        onInterrupt: () => () => {},
        tty: false,
        env,
        exitNow: () => {},
      });
      expect(code, err.text).toBe(2);
      expect(err.text.trim()).toMatch(expected);
      expect(err.text).not.toContain('s3cret');
    }
  });
});
