/**
 * A local live page for `examples/inspector.ts --serve`: a small HTTP server (node:http, on
 * 127.0.0.1) that serves one self-contained HTML page and a Server-Sent Events stream of the
 * machine actors' state values, fed by the runtime's `inspect` events. No network, no hosted
 * inspector: the page shows each session, run and toolBatch actor with its current state value,
 * its status and the states it passed through, updated as the agent runs, and an Approve button
 * while the run waits for an approval.
 *
 * @example
 * const page = await startInspectorPage({ port: 8080 });
 * const runtime = createRuntime({ ..., inspect: page.inspect });
 * await page.approval(); // resolves when someone presses Approve on the page
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { InspectionEvent } from 'xstate';
import { stateTrace } from './state-trace.js';

/** One machine actor as the page shows it. */
export interface ActorRow {
  /** `session`, `run #2`, `toolBatch #1`: the machine id, numbered when it ran more than once. */
  label: string;
  machine: string;
  /** The current state value (`a.b` for nested states). */
  state: string;
  /** XState's snapshot status: active, done, stopped, error. */
  status: string;
  states: string[];
}

export interface InspectorPage {
  url: string;
  /** The runtime's `inspect` option. */
  inspect(event: InspectionEvent): void;
  /** Shows the Approve button (with `what` beside it); resolves when it is pressed. */
  approval(what: string): Promise<void>;
  close(): Promise<void>;
}

const MACHINES = new Set(['session', 'run', 'toolBatch']);

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>actorloop · live machines</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; } td, th { padding: .3em .8em; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
td.state { font-weight: 600; font-family: ui-monospace, monospace; } td.states { color: #666; font-family: ui-monospace, monospace; font-size: 12px; }
tr.done td.state, tr.stopped td.state { color: #888; } #approval { margin: 1em 0; padding: .8em; background: #fff6d8; display: none; }
#connection { color: #888; }
</style></head>
<body>
<h1>Live machines</h1>
<p id="connection">connecting…</p>
<div id="approval"><span id="approval-text"></span> <button id="approve">Approve</button></div>
<table><thead><tr><th>actor</th><th>state</th><th>status</th><th>passed through</th></tr></thead><tbody id="actors"></tbody></table>
<script>
const body = document.getElementById('actors');
const approval = document.getElementById('approval');
document.getElementById('approve').onclick = () => { approval.style.display = 'none'; fetch('/approve', { method: 'POST' }); };
const source = new EventSource('/events');
source.onopen = () => { document.getElementById('connection').textContent = 'live'; };
source.onerror = () => { document.getElementById('connection').textContent = 'disconnected (the example stopped)'; };
source.onmessage = (m) => {
  const { actors, waiting } = JSON.parse(m.data);
  body.replaceChildren(...actors.map((a) => {
    const tr = document.createElement('tr');
    tr.className = a.status;
    tr.dataset.machine = a.machine;
    tr.dataset.label = a.label;
    tr.dataset.state = a.state;
    tr.dataset.status = a.status;
    for (const [cls, text] of [['label', a.label], ['state', a.state], ['status', a.status], ['states', a.states.join(' → ')]]) {
      const td = document.createElement('td');
      td.className = cls;
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  }));
  document.getElementById('approval-text').textContent = waiting ?? '';
  approval.style.display = waiting ? 'block' : 'none';
};
</script></body></html>
`;

/** Starts the page's server on 127.0.0.1 (`port: 0` picks a free one). */
export async function startInspectorPage(options: { port?: number } = {}): Promise<InspectorPage> {
  const trace = stateTrace();
  const status = new Map<string, string>();
  const clients = new Set<ServerResponse>();
  let waiting: { what: string; approve: () => void } | undefined;

  const rows = (): ActorRow[] => {
    const machines = trace.traces().filter((t) => t.isMachine && MACHINES.has(t.machine));
    const count = new Map<string, number>();
    for (const t of machines) count.set(t.machine, (count.get(t.machine) ?? 0) + 1);
    const nth = new Map<string, number>();
    return machines.map((t) => {
      const n = (nth.get(t.machine) ?? 0) + 1;
      nth.set(t.machine, n);
      return {
        label: count.get(t.machine)! > 1 ? `${t.machine} #${n}` : t.machine,
        machine: t.machine,
        state: t.states.at(-1) ?? '',
        status: status.get(t.sessionId) ?? 'active',
        states: t.states,
      };
    });
  };
  const message = () => `data: ${JSON.stringify({ actors: rows(), waiting: waiting?.what ?? null })}\n\n`;
  const broadcast = () => {
    const m = message();
    for (const c of clients) c.write(m);
  };

  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(PAGE);
    } else if (req.method === 'GET' && req.url === '/events') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
      res.write(message());
      clients.add(res);
      req.on('close', () => clients.delete(res));
    } else if (req.method === 'POST' && req.url === '/approve') {
      const w = waiting;
      waiting = undefined;
      w?.approve();
      broadcast();
      res.writeHead(w ? 204 : 409).end();
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 8080, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/`,
    inspect(event) {
      trace.inspect(event);
      if (event.type !== '@xstate.snapshot') return;
      const s = (event.snapshot as { status?: string }).status;
      if (s) status.set(event.actorRef.sessionId, s);
      broadcast();
    },
    approval(what) {
      return new Promise<void>((resolve) => {
        waiting = { what, approve: resolve };
        broadcast();
      });
    },
    async close() {
      for (const c of clients) c.end();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
