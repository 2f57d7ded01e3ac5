import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { createRuntime } from '../runtime/runtime.js';
import { nodeListener } from '../web/node-http.js';
import { hostAllowed, HostPattern, isLoopbackAddress, loopbackHosts } from '../web/hosts.js';
import { webHandler } from '../web/web-handler.js';
import { DataDir, PostgresUrl, dataDirOf, openDemoStore } from './data.js';
import { DEMO_PROMPT, DEMO_SYSTEM_PROMPT, Pace, Provider, chooseProvider, demoModel } from './demo-agent.js';
import { demoPaths, demoTools, prepareDemoFiles } from './demo-tools.js';
import { parseOptions, redactUrl } from './errors.js';
import type { Sink } from './progress.js';

/** A flag's whole number from `min` to `max`, given as a number or as digits (`abc`, `1.5`, `1e3` are refused). */
const wholeNumber = (min: number, max: number) => {
  const error = `expected a whole number ${min}–${max}`;
  return z
    .union([z.number(), z.string().regex(/^\d+$/).transform(Number)], { error })
    .pipe(z.number().int({ error }).min(min, { error }).max(max, { error }));
};
const Port = wholeNumber(0, 65535);
const LeaseMs = wholeNumber(100, 3_600_000);

export const WebOptions = z.strictObject({
  port: Port.default(8787),
  /** A loopback address only: the server has no authentication (an app adds its own with `authorize`). */
  host: z
    .string()
    .refine(
      isLoopbackAddress,
      'a loopback address (127.0.0.1, ::1, localhost): actorloop web has no authentication; ' +
        'serve others through webHandler({ authorize }) in your app',
    )
    .default('127.0.0.1'),
  /** Host header values served besides the loopback names with the bound port (e.g. a name in /etc/hosts). */
  allowedHosts: z.array(HostPattern).default([]),
  data: DataDir.optional(),
  postgres: PostgresUrl.optional(),
  provider: Provider.optional(),
  /** Scales the demo's delays (ACTORLOOP_DEMO_PACE). */
  pace: Pace.default(1),
  /** The serving worker's lease: how long a killed server's sessions wait before a new one takes them. */
  leaseMs: LeaseMs.default(5_000),
});
export type WebOptions = z.input<typeof WebOptions>;

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PAGE_DIR = `${ROOT}examples/web/`;

/** `actorloop/client` for the browser: built by `npm run build`, or bundled now when run from the sources. */
async function clientBundle(): Promise<string> {
  const built = `${ROOT}dist/web/client.browser.js`;
  if (!import.meta.url.endsWith('.ts') && existsSync(built)) return readFileSync(built, 'utf8');
  const esbuild = await import('esbuild');
  const out = await esbuild.build({
    entryPoints: [`${ROOT}src/web/client.ts`],
    bundle: true,
    platform: 'browser',
    format: 'esm',
    write: false,
    minify: true,
    logLevel: 'silent',
  });
  return out.outputFiles[0]!.text;
}

/**
 * `actorloop web`: the example chat page (examples/web) on the offline demo agent, whose deploy
 * needs an approval. One process serves the page, the session endpoints (`webHandler`) and a
 * worker (`runtime.serve`) that applies what the page submits and runs the turns.
 * Returns once listening; `close()` stops the worker, the server and the runtime.
 */
export async function startWeb(options: WebOptions, out: Sink): Promise<{ url: string; close(): Promise<void> }> {
  // each bad option named by its flag: `--port: expected a whole number 0–65535 (got "abc")`
  const o = parseOptions(WebOptions, options, 'web');
  const dataDir = dataDirOf(o.data);
  const paths = demoPaths(dataDir);
  const provider = chooseProvider(o.provider);
  const model = await demoModel(provider, o.pace);
  const store = openDemoStore(dataDir, o.postgres, () => prepareDemoFiles(paths));
  const runtime = createRuntime({
    store,
    model,
    tools: demoTools(paths, o.pace),
    systemPrompt: DEMO_SYSTEM_PROMPT,
    approvalFor: ['deploy'],
    // the page reads the final answer from the log; delivering it again is harmless
    delivery: { idempotent: true, deliver: async () => {} },
  });
  const stop = new AbortController();
  const worker = runtime.serve({ concurrency: 16, leaseMs: o.leaseMs, signal: stop.signal, pollMs: 250 });
  // the Host check needs the bound port (--port 0): it is set once listening, before any request
  const allowed: string[] = [];
  const handle = webHandler({ runtime });
  const client = await clientBundle();
  const files = new Map<string, [string, () => string]>([
    ['/', ['text/html; charset=utf-8', () => readFileSync(`${PAGE_DIR}index.html`, 'utf8')]],
    ['/app.js', ['text/javascript; charset=utf-8', () => readFileSync(`${PAGE_DIR}app.js`, 'utf8')]],
    ['/client.js', ['text/javascript; charset=utf-8', () => client]],
    ['/favicon.svg', ['image/svg+xml', () => readFileSync(`${PAGE_DIR}favicon.svg`, 'utf8')]],
    ['/favicon.ico', ['image/svg+xml', () => readFileSync(`${PAGE_DIR}favicon.svg`, 'utf8')]],
    ['/demo-prompt', ['text/plain; charset=utf-8', () => DEMO_PROMPT]],
  ]);
  const server = createServer(
    nodeListener(async (request) => {
      // DNS rebinding: a page of another site whose name resolves to 127.0.0.1 sends its own Host
      if (!hostAllowed(request, allowed)) return hostRefused(request);
      const file = request.method === 'GET' ? files.get(new URL(request.url).pathname) : undefined;
      if (file) return new Response(file[1](), { headers: { 'content-type': file[0], 'cache-control': 'no-store' } });
      return handle(request);
    }),
  );
  try {
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen(o.port, o.host, () => res());
    });
  } catch (e) {
    // the port is taken: nothing stays open (the worker has claimed nothing yet worth keeping)
    stop.abort();
    await worker.stop({ graceMs: 0 });
    await runtime.close();
    throw e;
  }
  const port = (server.address() as AddressInfo).port;
  allowed.push(...loopbackHosts(port), ...o.allowedHosts);
  const url = `http://${o.host.includes(':') ? `[${o.host}]` : o.host}:${port}/`;
  out.write(
    `actorloop web · model ${provider} · ${o.postgres ? `log ${redactUrl(o.postgres)}` : `data ${dataDir}`} · deploy needs approval\n`,
  );
  out.write(`listening ${url}\n`);
  let closing: Promise<void> | undefined;
  return {
    url,
    close: () =>
      (closing ??= (async () => {
        stop.abort();
        await worker.stop({ graceMs: 1000 });
        server.closeAllConnections();
        await new Promise<void>((res) => server.close(() => res()));
        await runtime.close();
      })()),
  };
}

function hostRefused(request: Request): Response {
  const host = (request.headers.get('host') ?? '').slice(0, 200);
  const message =
    `the Host ${JSON.stringify(host)} is not served here: ` +
    'actorloop web answers to localhost, 127.0.0.1 and [::1] (add a name with --allowed-host)';
  const headers = { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' };
  return new Response(JSON.stringify({ error: 'HostNotAllowed', message }), { status: 403, headers });
}

/** The CLI action: serves until Ctrl-C (or SIGTERM), then shuts down gracefully. Exit code 0. */
export async function webCommand(options: WebOptions, io: { out: Sink; onInterrupt(handler: () => void): () => void }): Promise<number> {
  const web = await startWeb(options, io.out);
  await new Promise<void>((res) => {
    const off = io.onInterrupt(() => {
      off();
      res();
    });
    process.once('SIGTERM', () => res());
  });
  io.out.write('stopping…\n');
  await web.close();
  return 0;
}
