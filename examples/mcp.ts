/**
 * An agent whose tools are served by a local MCP server (examples/mcp-server.ts, started here as
 * a child process over stdio): mcpTools turns the server's tools into tool definitions. The
 * model is scripted (offline): it reads and calculates in parallel, deploys, then answers.
 *
 *   npx tsx examples/mcp.ts [data dir]   (default: a new folder in the OS temp dir; printed)
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { contentText, createRuntime, lmdbStore, mcpTools, scriptedModel, type ModelRequest } from 'actorloop';

const dataDir = process.argv[2] ?? mkdtempSync(join(tmpdir(), 'actorloop-mcp-'));
console.log(`data in ${dataDir}`);
const server = join(import.meta.dirname, 'mcp-server.ts');

// A function that connects a client: the adapter calls it again after the server restarts.
// The clients stay ours: the newest is closed at the end.
let client: Client | undefined;
const connect = async () => {
  client = new Client({ name: 'actorloop-example', version: '1.0.0' });
  await client.connect(
    new StdioClientTransport({ command: process.execPath, args: [...process.execArgv, server, dataDir], stderr: 'inherit' }),
  );
  return client;
};
// deploy stays exclusive (the default); the two side-effect free tools may run in parallel
const tools = await mcpTools(connect, { parallel: ['calculate', 'read_file'] });
for (const t of tools) console.log(`tool ${t.name} (${t.mode})`);

/** The tool results of the conversation so far, by tool name. */
const results = (r: ModelRequest) =>
  r.messages.filter((m) => m.role === 'tool').map((m) => ({ name: m.name, text: typeof m.content === 'string' ? m.content : '' }));
const model = scriptedModel([
  {
    text: 'Reading the release notes and the service config, and doing the arithmetic.',
    toolCalls: [
      { name: 'read_file', arguments: { path: 'release-notes.md' } },
      { name: 'read_file', arguments: { path: 'service.json' } },
      { name: 'calculate', arguments: { expression: '(1 - 0.999) * 30 * 24 * 60' } },
      { name: 'calculate', arguments: { expression: '40 * 0.1' } },
    ],
  },
  {
    text: 'Deploying checkout 2.4.0 to staging.',
    toolCalls: [{ name: 'deploy', arguments: { service: 'checkout', version: '2.4.0', environment: 'staging' } }],
  },
  (request) => {
    const [budget, canary] = results(request)
      .filter((r) => r.name === 'calculate')
      .map((r) => r.text.split(' = ')[1]);
    const deployed = results(request).find((r) => r.name === 'deploy')?.text;
    return `Done: ${deployed}. The monthly error budget for a 99.9% SLO is ${budget} minutes, and the canary is ${canary} pods.`;
  },
]);

const runtime = createRuntime({
  store: lmdbStore({ path: join(dataDir, 'log') }),
  model,
  systemPrompt: 'You are a careful release assistant.',
  tools,
});
const session = await runtime.openSession(`mcp-${Date.now()}`);
session.subscribe((e) => {
  if (e.event.type === 'tool_end' && e.event.outcome.kind === 'completed')
    console.log(`${e.event.name}: ${contentText(e.event.outcome.content).split('\n')[0]}`);
});
const result = await session.execute({
  kind: 'prompt',
  runId: 'r1',
  attemptId: 'a1',
  message: 'Work out the error budget and the canary size, then deploy checkout 2.4.0 to staging.',
});
console.log(result.outcome, result.finalMessage);
await runtime.close();
await client?.close(); // ends the server child
