/**
 * A real MCP server (the SDK's McpServer) for the adapter's tests, over stdio (default) or
 * Streamable HTTP on loopback (`--http <port>`, printing `listening <port>`). Tools:
 * - `add` (read-only annotation): a + b, with structured content;
 * - `record`: appends `{ note, key }` to the file named by MCP_TEST_JOURNAL (the idempotency key
 *   from `_meta`), answers `recorded`;
 * - `slow`: writes `started <key>` to the journal, then waits `ms` (honours cancellation);
 * - `fails`: answers with `isError: true`.
 * `MCP_TEST_VARIANT=changed` adds a tool `extra` (a changed tool list); `=bad` serves a tool whose
 * input schema is not valid JSON Schema; `=live` adds `change_tools`, which changes the list while
 * the client stays connected (the SDK sends `notifications/tools/list_changed`): `how` = `add`
 * (a tool `extra`), `remove` (`record`), `reshape` (`add` requires a third number `c`), `break`
 * (a tool `bad.name`, whose name no provider takes), `scalar` (a tool `scalar` whose input schema's
 * type is `string`) or `heal` (removes `bad.name` and `scalar`).
 * `=unlisted` answers `tools/list` with an error. `=names` adds tools named `__proto__`, `constructor` and `toString` (each takes `{ note }`,
 * journals `<name> <note> <key>` and answers `<name> ran: <note>`); `=scalar` adds `scalar`.
 * `=outputs` adds tools that answer outside a schema, each taking `{ note }`, journalling
 * `<name> <note> <key>` and answering `charged <note>`: `charge` and `charge_plain` declare an
 * output schema (`{ id: string }`, required) and answer structured content `{ id: 5 }`, or none;
 * `charge_block` adds a content block of a type MCP does not define, `charge_list` answers
 * structured content that is an array (neither fits the MCP schema of a tool result: they are
 * sent past the SDK Server's own check, as a server not built on the SDK could send them).
 * The SDK's McpServer cannot register these (it keys its tools by name in a plain object, and its
 * schemas are always objects): `serveAlso` serves them beside its own.
 */
import { appendFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const journal = process.env.MCP_TEST_JOURNAL;
const variant = process.env.MCP_TEST_VARIANT ?? '';
const log = (line: string) => {
  if (journal) appendFileSync(journal, line + '\n');
};
const keyOf = (extra: { _meta?: Record<string, unknown> }) => String(extra._meta?.['actorloop/idempotencyKey'] ?? '');

type Handler = (request: never, extra: never) => Promise<Record<string, unknown>>;

/**
 * Serves the tools `also()` returns beside the server's own: `tools/list` lists them after the
 * registered ones, and `tools/call` of one of their names runs `call` (any other name goes to the
 * McpServer's own handler). Needs at least one registered tool (for the McpServer's handlers).
 */
function serveAlso(
  server: McpServer,
  also: () => Tool[],
  call: (name: string, args: Record<string, unknown>, key: string) => string | CallToolResult,
): void {
  // the McpServer's own handlers, as the protocol layer stores them by method
  const own = (server.server as unknown as { _requestHandlers: Map<string, Handler> })._requestHandlers;
  const list = own.get('tools/list')!;
  const run = own.get('tools/call')!;
  server.server.setRequestHandler(ListToolsRequestSchema, async (request, extra) => {
    const listed = (await list(request as never, extra as never)) as { tools: Tool[] };
    return { ...listed, tools: [...listed.tools, ...also()] };
  });
  server.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const name = request.params.name;
    if (!also().some((t) => t.name === name)) return (await run(request as never, extra as never)) as never;
    const answer = call(name, request.params.arguments ?? {}, keyOf(extra));
    return typeof answer === 'string' ? { content: [{ type: 'text', text: answer }] } : answer;
  });
}

const NOTE: Tool['inputSchema'] = { type: 'object', properties: { note: { type: 'string' } }, required: ['note'] };
const ODD_NAMES: Tool[] = ['__proto__', 'constructor', 'toString'].map((name) => ({
  name,
  description: `A tool named ${name}`,
  inputSchema: NOTE,
}));
const ID_OUTPUT: Tool['outputSchema'] = { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] };
const OUTPUTS: Tool[] = ['charge', 'charge_plain', 'charge_block', 'charge_list'].map((name) => ({
  name,
  description: `Charges, answering outside a schema (${name})`,
  inputSchema: NOTE,
  ...(name === 'charge' || name === 'charge_plain' ? { outputSchema: ID_OUTPUT } : {}),
}));
const SCALAR = { name: 'scalar', description: 'Takes a string, not an object', inputSchema: { type: 'string' } } as unknown as Tool;

function makeServer(): McpServer {
  const server = new McpServer({ name: 'actorloop-test', version: '1.0.0' });
  const add = server.registerTool(
    'add',
    {
      description: 'Adds two numbers',
      inputSchema: { a: z.number(), b: z.number() },
      outputSchema: { sum: z.number() },
      annotations: { readOnlyHint: true },
    },
    async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } }),
  );
  const record = server.registerTool(
    'record',
    { description: 'Records a note', inputSchema: { note: z.string() } },
    async ({ note }, extra) => {
      log(`record ${note} ${keyOf(extra)}`);
      return { content: [{ type: 'text', text: `recorded ${note}` }] };
    },
  );
  server.registerTool('slow', { description: 'Waits', inputSchema: { ms: z.number() } }, async ({ ms }, extra) => {
    log(`started ${keyOf(extra)}`);
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      extra.signal.addEventListener('abort', () => {
        clearTimeout(t);
        resolve();
      });
    });
    log(`finished ${keyOf(extra)}`);
    return { content: [{ type: 'text', text: 'slept' }] };
  });
  server.registerTool('fails', { description: 'Always fails', inputSchema: {} }, async () => ({
    content: [{ type: 'text', text: 'it broke' }],
    isError: true,
  }));
  if (variant === 'changed')
    server.registerTool('extra', { description: 'New', inputSchema: {} }, async () => ({ content: [{ type: 'text', text: 'extra' }] }));
  if (variant === 'live') {
    let broken: { remove(): void } | undefined;
    let scalar = false;
    server.registerTool(
      'change_tools',
      { description: 'Changes the tool list', inputSchema: { how: z.enum(['add', 'remove', 'reshape', 'break', 'scalar', 'heal']) } },
      async ({ how }) => {
        if (how === 'add')
          server.registerTool('extra', { description: 'New', inputSchema: {} }, async () => ({
            content: [{ type: 'text', text: 'extra' }],
          }));
        if (how === 'remove') record.remove();
        if (how === 'reshape') {
          add.update({
            paramsSchema: { a: z.number(), b: z.number(), c: z.number() },
            callback: async ({ a, b, c }) => ({
              content: [{ type: 'text', text: String(a + b + c) }],
              structuredContent: { sum: a + b + c },
            }),
          });
        }
        if (how === 'break')
          broken = server.registerTool('bad.name', { description: 'A name no provider takes', inputSchema: {} }, async () => ({
            content: [],
          }));
        if (how === 'scalar' || how === 'heal') {
          scalar = how === 'scalar';
          server.sendToolListChanged();
        }
        if (how === 'heal') broken?.remove();
        return { content: [{ type: 'text', text: `changed: ${how}` }] };
      },
    );
    serveAlso(
      server,
      () => (scalar ? [SCALAR] : []),
      () => 'scalar ran',
    );
  }
  if (variant === 'names') {
    serveAlso(
      server,
      () => ODD_NAMES,
      (name, args, key) => {
        log(`${name} ${String(args.note)} ${key}`);
        return `${name} ran: ${String(args.note)}`;
      },
    );
  }
  if (variant === 'scalar')
    serveAlso(
      server,
      () => [SCALAR],
      () => 'scalar ran',
    );
  if (variant === 'outputs') {
    serveAlso(
      server,
      () => OUTPUTS,
      (name, args, key) => {
        log(`${name} ${String(args.note)} ${key}`);
        const content = [{ type: 'text' as const, text: `charged ${String(args.note)}` }];
        return name === 'charge' ? { content, structuredContent: { id: 5 } } : { content };
      },
    );
    // the Server checks a handler's result against the MCP schema: these two go around the check
    const handlers = (server.server as unknown as { _requestHandlers: Map<string, Handler> })._requestHandlers;
    const checked = handlers.get('tools/call')!;
    handlers.set('tools/call', async (request, extra) => {
      const { name } = (request as { params: { name: string } }).params;
      const answer = (await checked(request, extra)) as { content: unknown[] };
      if (name === 'charge_block') return { content: [...answer.content, { type: 'widget', text: 'x' }] };
      if (name === 'charge_list') return { ...answer, structuredContent: [1, 2] };
      return answer;
    });
  }
  if (variant === 'unlisted') {
    server.server.setRequestHandler(ListToolsRequestSchema, async () => {
      throw new Error('the tool list is not available');
    });
  }
  if (variant === 'bad') {
    // a list whose schema no validator compiles (the SDK would never produce one itself)
    server.server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [{ name: 'broken', description: 'Bad schema', inputSchema: { type: 'object', properties: { a: { type: 'strin' } } } }],
    }));
  }
  return server;
}

const httpAt = process.argv.indexOf('--http');
if (httpAt === -1) {
  await makeServer().connect(new StdioServerTransport());
} else {
  const port = Number(process.argv[httpAt + 1] ?? 0);
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const respond = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = chunks.length > 0 ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
    const sid = req.headers['mcp-session-id'];
    let transport = typeof sid === 'string' ? transports.get(sid) : undefined;
    if (typeof sid === 'string' && !transport) {
      // per the spec: an unknown session gets 404, and the client starts a new one
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
      return;
    }
    if (!transport) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void transports.set(id, transport!),
      });
      await makeServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  };
  // a request that fails (a body that is not JSON) is answered 500, not an unhandled rejection that ends the server
  const http = createServer((req, res) => {
    respond(req, res).catch((e: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(String(e));
    });
  });
  http.listen(port, '127.0.0.1', () => {
    const a = http.address();
    process.stdout.write(`listening ${typeof a === 'object' && a ? a.port : port}\n`);
  });
}
