import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, nodeListener, scriptedModel, webHandler } from '../../src/index.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function listen(maxBodyBytes: number, allowedHosts?: string[]): Promise<{ port: number; sockets: Socket[] }> {
  const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['ok']) });
  const sockets: Socket[] = [];
  const server: Server = createServer(nodeListener(webHandler({ runtime, maxBodyBytes, ...(allowedHosts ? { allowedHosts } : {}) })));
  server.on('connection', (s) => sockets.push(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => runtime.close());
  cleanups.push(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  return { port: (server.address() as { port: number }).port, sockets };
}

describe('nodeListener over raw HTTP', () => {
  it('a chunked POST larger than maxBodyBytes: the server reads at most the limit and one read more, answers 413 and closes the connection', async () => {
    const limit = 64 * 1024;
    const { port, sockets } = await listen(limit);
    const client = connect(port, '127.0.0.1');
    cleanups.push(() => void client.destroy());
    let response = '';
    let closed = false;
    client.on('data', (d) => (response += d.toString('latin1')));
    client.on('close', () => (closed = true));
    client.on('error', () => undefined); // the server stops reading: a write may meet a reset
    await new Promise((r) => client.once('connect', r));
    client.write(
      `POST /sessions/s1/messages HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
    );
    // up to 64 MiB in 1 MiB chunks, as fast as the connection takes them, until the server answers or closes
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    let written = 0;
    while (written < 64 * chunk.length && !closed && response === '') {
      const room = client.write(Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]));
      written += chunk.length;
      if (!room) await Promise.race([new Promise((r) => client.once('drain', r)), new Promise((r) => setTimeout(r, 200))]);
    }
    const deadline = Date.now() + 10_000;
    while (!closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(response.split('\r\n')[0]).toBe('HTTP/1.1 413 Payload Too Large');
    expect(response.toLowerCase()).toContain('connection: close');
    expect(closed).toBe(true);
    // what the server took off the socket: the headers, the limit, and at most one read (64 KiB) more
    expect(sockets[0]!.bytesRead).toBeLessThanOrEqual(limit + 64 * 1024 + 1024);
    expect(written).toBeLessThan(64 * chunk.length); // the client was stopped long before its 64 MiB
  });

  it('a body within the limit is read whole and the connection is kept', async () => {
    const { port } = await listen(64 * 1024);
    const message = 'x'.repeat(40 * 1024);
    const res = await fetch(`http://127.0.0.1:${port}/sessions/s1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new ReadableStream({
        start(c) {
          const bytes = new TextEncoder().encode(JSON.stringify({ inputId: 'i1', message }));
          for (let i = 0; i < bytes.length; i += 1000) c.enqueue(bytes.slice(i, i + 1000));
          c.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(202);
    expect(res.headers.get('connection')).not.toBe('close');
  });

  it('the URL is built from the target alone: a Host that is not a host name is a 403 HostNotAllowed under allowedHosts (never a 500), credentials in an absolute target are dropped, //x stays a path', async () => {
    const { port } = await listen(64 * 1024, ['127.0.0.1']);
    const statusOf = async (head: string): Promise<string> => {
      const client = connect(port, '127.0.0.1');
      cleanups.push(() => void client.destroy());
      let response = '';
      client.on('data', (d) => (response += d.toString('latin1')));
      await new Promise((r) => client.once('connect', r));
      client.write(`${head}\r\nConnection: close\r\n\r\n`);
      await new Promise((r) => client.once('close', r));
      return response.split('\r\n')[0]!;
    };
    for (const host of [`127.0.0.1:${port}.evil.com`, `127.0.0.1:${port}@evil`, 'evil.com'])
      expect([host, await statusOf(`GET /sessions HTTP/1.1\r\nHost: ${host}`)]).toEqual([host, 'HTTP/1.1 403 Forbidden']);
    expect(await statusOf(`GET http://u:p@evil.com/sessions HTTP/1.1\r\nHost: evil.com`)).toBe('HTTP/1.1 403 Forbidden');
    // the same target on an allowed Host: served (its path taken, its credentials dropped)
    expect(await statusOf(`GET http://u:p@127.0.0.1:${port}/sessions HTTP/1.1\r\nHost: 127.0.0.1:${port}`)).toBe('HTTP/1.1 200 OK');
    // a path that looks like a host stays a path
    expect(await statusOf(`GET //evil.com/sessions HTTP/1.1\r\nHost: 127.0.0.1:${port}`)).toBe('HTTP/1.1 404 Not Found');
  });

  it('an origin that is not http(s) is refused when the listener is made', () => {
    const handle = () => new Response('ok');
    expect(() => nodeListener(handle, { origin: 'app://desk' })).toThrow(/origin: an http\(s\) origin/);
    expect(() => nodeListener(handle, { origin: 'https://chat.example.com/api' })).not.toThrow();
  });
});
