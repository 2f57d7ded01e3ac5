/**
 * The demo agent with its tools served by a local MCP server (examples/mcp-server.ts, started
 * here as a child process over stdio): mcpTools turns the server's tools into tool definitions.
 *
 *   npx tsx examples/mcp.ts [data dir]
 */
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { createRuntime, lmdbStore, mcpTools } from 'actorloop';
import { DEMO_PROMPT, DEMO_SYSTEM_PROMPT, demoModel } from '../src/cli/demo-agent.js';

const dataDir = process.argv[2] ?? './.actorloop-mcp';
const server = join(import.meta.dirname, 'mcp-server.ts');

// A function that connects a client: the adapter calls it again after the server restarts.
// The clients stay ours: the newest is closed at the end.
let client: Client | undefined;
const connect = async () => {
  client = new Client({ name: 'actorloop-example', version: '1.0.0' });
  await client.connect(new StdioClientTransport({ command: process.execPath, args: ['--import', 'tsx', server, dataDir], stderr: 'inherit' }));
  return client;
};
// deploy stays exclusive (the default); the two side-effect free tools may run in parallel
const tools = await mcpTools(connect, { parallel: ['calculate', 'read_file'] });
for (const t of tools) console.log(`tool ${t.name} (${t.mode})`);

const runtime = createRuntime({ store: lmdbStore({ path: join(dataDir, 'log') }), model: await demoModel('scripted', 0), systemPrompt: DEMO_SYSTEM_PROMPT, tools });
const session = await runtime.openSession(`mcp-${Date.now()}`);
session.subscribe((e) => {
  if (e.event.type === 'tool_end' && e.event.outcome.kind === 'completed') console.log(`${e.event.name}: ${e.event.outcome.content.split('\n')[0]}`);
});
const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: DEMO_PROMPT });
console.log(result.outcome, result.finalMessage);
await runtime.close();
await client?.close(); // ends the server child
