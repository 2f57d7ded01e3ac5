/**
 * A local MCP server (the official SDK's McpServer over stdio) serving the demo agent's tools:
 * calculate, read_file and deploy, each run with the idempotency key the client sent in `_meta`.
 *
 *   node --import tsx examples/mcp-server.ts <data dir>
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { z } from 'zod';
import { demoPaths, demoTools, prepareDemoFiles } from '../src/cli/demo-tools.js';

const paths = demoPaths(process.argv[2] ?? './.actorloop-mcp');
prepareDemoFiles(paths);
const server = new McpServer({ name: 'demo-tools', version: '1.0.0' });
/** A tool's return as MCP text: a string as it is, a completed outcome's content, any other JSON value serialised. */
const textOf = (out: unknown): string => (typeof out === 'string' ? out : typeof out === 'object' && out !== null && (out as { kind?: unknown }).kind === 'completed' ? String((out as { content: unknown }).content) : JSON.stringify(out));

for (const tool of demoTools(paths, 0)) {
  const shape = (tool.parameters as unknown as z.ZodObject).shape;
  const readOnly = tool.mode === 'parallel';
  server.registerTool(tool.name, { description: tool.description, inputSchema: shape, annotations: { readOnlyHint: readOnly } }, async (args, extra) => {
    const key = String(extra._meta?.['actorloop/idempotencyKey'] ?? `request-${extra.requestId}`);
    try {
      const out = await tool.execute(args, { signal: extra.signal, idempotencyKey: key, sessionId: 'mcp', runId: 'mcp', callId: String(extra.requestId), emit: () => {} });
      return { content: [{ type: 'text' as const, text: textOf(out) }] };
    } catch (e) {
      return { content: [{ type: 'text' as const, text: (e as Error).message }], isError: true };
    }
  });
}
await server.connect(new StdioServerTransport());
