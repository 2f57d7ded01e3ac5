// The chat page on a few lines of Node: `npx tsx examples/web/server.ts [dataDir] [port]`
// (`npx actorloop web` is the same with options). One process serves the page, the session
// endpoints and a worker that runs the turns; kill it at any moment and start it again.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { build } from 'esbuild';
import { createRuntime, lmdbStore, nodeListener, webHandler } from 'actorloop';
import { DEMO_PROMPT, DEMO_SYSTEM_PROMPT, demoModel } from '../../src/cli/demo-agent.js';
import { demoPaths, demoTools, prepareDemoFiles } from '../../src/cli/demo-tools.js';

const [dataDir = '.actorloop-web', port = '8787'] = process.argv.slice(2);
const paths = demoPaths(dataDir);
prepareDemoFiles(paths);
const runtime = createRuntime({
  store: lmdbStore({ path: dataDir }),
  model: await demoModel('scripted'),
  tools: demoTools(paths),
  systemPrompt: DEMO_SYSTEM_PROMPT,
  approvalFor: ['deploy'], // the deploy waits for Approve / Deny in the page
});
runtime.serve({ leaseMs: 5000 }); // applies what the page submits, resumes runs a crash cut off
// answers only to the loopback names with this port: a foreign page whose name resolves to
// 127.0.0.1 (DNS rebinding) gets a 403; put `authorize` here before serving anyone else
const api = webHandler({ runtime, allowedHosts: [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`] });

const page = (file: string) => readFileSync(new URL(file, import.meta.url), 'utf8');
const client = (
  await build({ entryPoints: [new URL('../../src/web/client.ts', import.meta.url).pathname], bundle: true, format: 'esm', write: false })
).outputFiles[0]!.text;
const files = new Map([
  ['/', ['text/html', page('index.html')]],
  ['/app.js', ['text/javascript', page('app.js')]],
  ['/client.js', ['text/javascript', client]],
  ['/favicon.svg', ['image/svg+xml', page('favicon.svg')]],
  ['/favicon.ico', ['image/svg+xml', page('favicon.svg')]],
  ['/demo-prompt', ['text/plain', DEMO_PROMPT]],
]);

http
  .createServer(
    nodeListener(async (req) => {
      const file = files.get(new URL(req.url).pathname);
      return file ? new Response(file[1], { headers: { 'content-type': `${file[0]}; charset=utf-8` } }) : api(req);
    }),
  )
  .listen(Number(port), '127.0.0.1', () => console.log(`listening http://127.0.0.1:${port}/`));
