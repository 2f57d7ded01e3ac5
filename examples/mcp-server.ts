/**
 * A local MCP server (the official SDK's McpServer over stdio) with three tools an agent might
 * call: read_file (a sandbox folder of the data dir), calculate (arithmetic, its own parser) and
 * deploy (a simulated deploy that keeps one record per idempotency key, the key actorloop sends
 * in the call's `_meta`, so the same call never deploys twice).
 *
 *   node --import tsx examples/mcp-server.ts <data dir>
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { IDEMPOTENCY_META_KEY } from 'actorloop';
import { z } from 'zod';

const dataDir = process.argv[2];
if (!dataDir) throw new Error('usage: mcp-server.ts <data dir>');
const sandbox = join(dataDir, 'sandbox');
const deployments = join(dataDir, 'deployments');
mkdirSync(sandbox, { recursive: true });
mkdirSync(deployments, { recursive: true });
writeFileSync(join(sandbox, 'release-notes.md'), '# checkout 2.4.0\n\n- faster cart totals\n- no schema changes: safe to roll back\n');
writeFileSync(join(sandbox, 'service.json'), JSON.stringify({ service: 'checkout', slo: 0.999, pods: 40 }, null, 2));

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });
const server = new McpServer({ name: 'example-tools', version: '1.0.0' });

server.registerTool(
  'calculate',
  {
    description: 'Evaluates arithmetic: + - * / and parentheses',
    inputSchema: { expression: z.string() },
    annotations: { readOnlyHint: true },
  },
  async ({ expression }) => {
    try {
      return text(`${expression} = ${Number(evaluate(expression).toPrecision(12))}`);
    } catch (e) {
      return { ...text((e as Error).message), isError: true };
    }
  },
);

server.registerTool(
  'read_file',
  { description: 'Reads a file of the sandbox folder', inputSchema: { path: z.string() }, annotations: { readOnlyHint: true } },
  async ({ path }) => {
    if (!/^[\w.-]+$/.test(path) || path.startsWith('.')) return { ...text(`not a file of the sandbox: ${path}`), isError: true };
    const file = join(sandbox, path);
    return existsSync(file) ? text(readFileSync(file, 'utf8')) : { ...text(`no such file: ${path}`), isError: true };
  },
);

server.registerTool(
  'deploy',
  {
    description: 'Deploys a service version to an environment (slow)',
    inputSchema: { service: z.string(), version: z.string(), environment: z.string() },
  },
  async ({ service, version, environment }, extra) => {
    const key = String(extra._meta?.[IDEMPOTENCY_META_KEY] ?? `request-${extra.requestId}`);
    const record = join(deployments, `${createHash('sha256').update(key).digest('hex').slice(0, 16)}.json`);
    if (existsSync(record)) return text(JSON.parse(readFileSync(record, 'utf8')).result); // this call already deployed
    await new Promise((resolve) => setTimeout(resolve, 300));
    if (extra.signal.aborted) return { ...text('deploy cancelled before it took effect'), isError: true };
    const result = `deployed ${service} ${version} to ${environment} (deployment dep-${createHash('sha256').update(`dep:${key}`).digest('hex').slice(0, 8)})`;
    writeFileSync(record, JSON.stringify({ key, result }));
    return text(result);
  },
);

/** + - * / and parentheses over numbers, by recursive descent (no eval). */
function evaluate(source: string): number {
  const tokens = source.match(/\d+(?:\.\d+)?|[-+*/()]|\S/g) ?? [];
  let i = 0;
  const next = () => tokens[i++];
  const atom = (): number => {
    const t = next();
    if (t === '(') {
      const v = sum();
      if (next() !== ')') throw new Error(`missing ) in ${source}`);
      return v;
    }
    if (t === '-') return -atom();
    if (t !== undefined && /^\d/.test(t)) return Number(t);
    throw new Error(`unexpected ${t ?? 'end'} in ${source}`);
  };
  const product = (): number => {
    let v = atom();
    while (tokens[i] === '*' || tokens[i] === '/') v = next() === '*' ? v * atom() : v / atom();
    return v;
  };
  const sum = (): number => {
    let v = product();
    while (tokens[i] === '+' || tokens[i] === '-') v = next() === '+' ? v + product() : v - product();
    return v;
  };
  const v = sum();
  if (i < tokens.length) throw new Error(`unexpected ${tokens[i]} in ${source}`);
  return v;
}

await server.connect(new StdioServerTransport());
