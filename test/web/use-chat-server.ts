// The server of test/web/use-chat.browser.test.ts: actorloop's webHandler under /api (so useChat's
// default transport finds /api/chat) over an LMDB store, a worker running the offline demo agent
// (no approval), and the Vite-built page. Args: dataDir port pageDir. Killed with SIGKILL mid-run.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { extname, join } from 'node:path';
import { createRuntime, lmdbStore, nodeListener, webHandler } from '../../src/index.js';
import { DEMO_SYSTEM_PROMPT, demoModel } from '../../src/cli/demo-agent.js';
import { demoPaths, demoTools, prepareDemoFiles } from '../../src/cli/demo-tools.js';

const [dataDir, port, pageDir] = process.argv.slice(2) as [string, string, string];
const pace = Number(process.env.ACTORLOOP_DEMO_PACE ?? '0.3');
const paths = demoPaths(dataDir);
prepareDemoFiles(paths);
const runtime = createRuntime({
  store: lmdbStore({ path: dataDir }),
  model: await demoModel('scripted', pace),
  tools: demoTools(paths, pace),
  systemPrompt: DEMO_SYSTEM_PROMPT,
  delivery: { idempotent: true, deliver: async () => {} },
});
runtime.serve({ concurrency: 4, leaseMs: 1500, pollMs: 100 });
const api = webHandler({ runtime, basePath: '/api', stream: { pollMs: 100 } });
const TYPES = new Map([
  ['.html', 'text/html'],
  ['.js', 'text/javascript'],
  ['.css', 'text/css'],
]);
http
  .createServer(
    nodeListener(async (req) => {
      const path = new URL(req.url).pathname;
      if (path.startsWith('/api/')) return api(req);
      const file = path === '/' ? 'index.html' : path.slice(1);
      if (file.includes('..')) return new Response('no', { status: 400 });
      try {
        const body = readFileSync(join(pageDir, file));
        return new Response(body, { headers: { 'content-type': TYPES.get(extname(file)) ?? 'application/octet-stream' } });
      } catch {
        return new Response('not found', { status: 404 });
      }
    }),
  )
  .listen(Number(port), '127.0.0.1', () => console.log(`listening ${port}`));
