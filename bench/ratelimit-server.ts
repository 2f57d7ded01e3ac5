/**
 * A local provider for the rate-limit bench: speaks OpenAI Chat Completions (streamed, with the
 * include_usage chunk) and enforces an input-tokens-per-window limit as a token bucket (full at
 * the start, refilled continuously), answering 429 with `retry-after-ms` beyond it — as OpenAI
 * describes its own limits. It counts a request's input tokens as 4 characters a token per message.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RateServer {
  baseURL: string;
  /** When the first request came (the bucket full until then): the first window starts here. */
  firstAt: number | undefined;
  /** Accepted requests: when, and their input tokens. */
  accepted: { at: number; tokens: number }[];
  /** When each 429 was answered. */
  refused: number[];
  /** By how many tokens each 429's request was short (the same order as `refused`). */
  short: number[];
  close(): Promise<void>;
}

export async function startRateServer(o: { tokensPerWindow: number; windowMs: number }): Promise<RateServer> {
  const perMs = o.tokensPerWindow / o.windowMs;
  let level = o.tokensPerWindow;
  let at = performance.now();
  const s: Omit<RateServer, 'baseURL' | 'close'> = { firstAt: undefined, accepted: [], refused: [], short: [] };
  const handle = (req: IncomingMessage, res: ServerResponse, body: string) => {
    const messages = (JSON.parse(body) as { messages: { content?: unknown }[] }).messages;
    const tokens = messages.reduce((n, m) => n + Math.ceil((typeof m.content === 'string' ? m.content.length : 0) / 4), 0);
    const now = performance.now();
    s.firstAt ??= now;
    level = Math.min(o.tokensPerWindow, level + (now - at) * perMs);
    at = now;
    if (level < tokens) {
      s.refused.push(now);
      s.short.push(tokens - level);
      const wait = Math.ceil((tokens - level) / perMs);
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after-ms': String(wait) });
      res.end(JSON.stringify({ error: { message: 'Rate limit reached for input tokens', type: 'tokens', code: 'rate_limit_exceeded' } }));
      return;
    }
    level -= tokens;
    s.accepted.push({ at: now, tokens });
    const chunk = (choices: unknown[], usage?: unknown) =>
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'bench', choices, ...(usage ? { usage } : {}) })}\n\n`;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(
      chunk([{ index: 0, delta: { role: 'assistant', content: 'ok' }, finish_reason: null }]) +
        chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]) +
        chunk([], { prompt_tokens: tokens, completion_tokens: 1, total_tokens: tokens + 1 }) +
        'data: [DONE]\n\n',
    );
  };
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => handle(req, res, body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    get firstAt() {
      return s.firstAt;
    },
    accepted: s.accepted,
    refused: s.refused,
    short: s.short,
    baseURL: `http://127.0.0.1:${port}/v1`,
    close: () => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))),
  };
}

/** The bench's workload: sessions `from..from+count`, each `runs` prompts one after the other; answers how many runs failed. */
export async function runSessions(
  runtime: { openSession(id: string): Promise<{ execute(r: object): Promise<{ status: string }> }> },
  o: { from: number; count: number; runs: number; promptChars: number },
): Promise<number> {
  let failed = 0;
  await Promise.all(
    Array.from({ length: o.count }, async (_, k) => {
      const i = o.from + k;
      const s = await runtime.openSession(`s${i}`);
      for (let r = 0; r < o.runs; r++) {
        const message = `session ${i} run ${r} `.padEnd(o.promptChars, 'x');
        const res = await s.execute({ kind: 'prompt', runId: `r${r}`, attemptId: `a${r}`, message });
        if (res.status !== 'succeeded') failed++;
      }
    }),
  );
  return failed;
}
