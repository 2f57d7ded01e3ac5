import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, afterEach } from 'vitest';
import { killAllChildren, REPO_ROOT, spawnTs, type ChildRun } from '../../crash/child-util.js';
import { tempDir } from '../../helpers/tmp.js';
import { scaled } from '../../helpers/load.js';

export const SERVER = join(REPO_ROOT, 'test/tools/mcp/server.ts');

/**
 * A test file's MCP fixtures: a fresh journal file per server, and the clients it pushes onto
 * `clients` closed (and every child server killed) after each test.
 */
export function mcpFixtures(prefix: string): { journal: () => string; clients: Client[] } {
  const dir = tempDir(prefix);
  let n = 0;
  const clients: Client[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) await c.close().catch(() => {});
    await killAllChildren();
  });
  afterAll(async () => {
    await dir.cleanup();
  });
  return { journal: () => join(dir.path, `journal-${++n}.txt`), clients };
}

/** The lines the test server wrote to its journal. */
export const journalOf = (file: string): string[] => {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
};

export async function until(pred: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + scaled(ms);
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Connects a new SDK client to a new stdio server child (its transport kept, for its pid). */
export async function stdioClient(env: Record<string, string>): Promise<{ client: Client; transport: StdioClientTransport }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', SERVER],
    cwd: REPO_ROOT,
    env: { ...(process.env as Record<string, string>), NODE_OPTIONS: '', ...env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'actorloop-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

/** A Streamable HTTP server child on loopback; `port` 0 picks one. */
export async function httpServer(port: number, env: Record<string, string>): Promise<{ child: ChildRun; port: number }> {
  // spawnTs passes the test process's env on: set for the spawn, then put back
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  const child = spawnTs(SERVER, ['--http', String(port)], { label: 'mcp http server' });
  for (const [k, v] of Object.entries(saved))
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  await until(() => child.lines.some((l) => l.startsWith('listening ')), 'the HTTP MCP server to listen', 20_000);
  return { child, port: Number(child.lines.find((l) => l.startsWith('listening '))!.split(' ')[1]) };
}

export async function httpClient(port: number): Promise<Client> {
  const client = new Client({ name: 'actorloop-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
  return client;
}
