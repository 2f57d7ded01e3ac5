/**
 * Child program of the serve fault tests (test/crash/serve-faults.test.ts) and the serve bench:
 * real processes sharing one store, so the parent can SIGKILL or SIGSTOP a worker at any instant.
 *
 *   node --import tsx test/crash/serve-child.ts <mode> <store> [--flags]
 *
 * `<store>` is `pg:<url>#<schema>` or `lmdb:<path>`.
 * - `worker`: `runtime.serve` with a tool-loop model (`--steps`, 2 tools per step: `lookup`
 *   (parallel) and `charge` (exclusive), `--latency` ms per model call). `charge` appends
 *   `START <sessionId> <idempotencyKey> <pid>` to `<ledger>/<pid>.txt` before its effect and
 *   `END …` after it (`--tool-ms` between them). Prints `READY`, then one `EV <type> <sessionId>`
 *   line per serve event (`--wait-go`: READY first, serving only after `GO` on stdin); on SIGTERM it stops gracefully (`STOPPED`) and exits 0.
 *   `--old-serve=<file>`: serves with the serve before the worker machine (bench/serve-old.ts), for the bench.
 *   `--stall-after-intent-ms=N`: the store is wrapped as an app could wrap it: the first head
 *   read after an append that records a `charge` intent returns only N ms after the read (a
 *   worker paused right after its fence read: SIGSTOP, a long GC, CPU starvation); prints
 *   `STALLED <sessionId>` when the stall begins.
 * - `feed`: submits input `<s>-in0` to sessions `s0..s<n-1>` (`--sessions`), prints `FED 0`, then
 *   on `WAVE` from stdin submits `<s>-in1` to each and prints `FED 1`; exits on `EXIT`.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { ServeOptions } from '../../src/contracts/inbox.js';
import { createRuntime, type Runtime } from '../../src/runtime/runtime.js';
import type { ServeHandle } from '../../src/runtime/serve.js';
import { defineTool } from '../../src/tools/define-tool.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { postgresStore } from '../../src/persistence/postgres/postgres-store.js';
import { toolLoopModel } from '../helpers/serve-model.js';
import { nextLine, say } from './child-util.js';

const [mode, storeArg, ...rest] = process.argv.slice(2);
const flags = new Map<string, string>(
  rest.map((a) => {
    const [k, v] = a.replace(/^--/, '').split('=');
    return [k!, v ?? 'true'];
  }),
);
const num = (name: string, fallback: number) => (flags.has(name) ? Number(flags.get(name)) : fallback);

export function openStore(spec: string, options: { maxConnections?: number } = {}): EventStore {
  if (spec.startsWith('pg:')) {
    const [url, schema] = spec.slice(3).split('#');
    return postgresStore({
      connectionString: url!,
      schema: schema!,
      maxConnections: options.maxConnections ?? 6,
      idleInTransactionTimeoutMs: 2000,
    });
  }
  return lmdbStore({ path: spec.slice(5) });
}

/** The fault tests' and the bench's agent: its tools and model. */
export function serveAgent(o: { steps: number; latencyMs: number; toolMs: number; ledger?: string }) {
  const key = z.object({ key: z.string() });
  const lookup = defineTool({
    name: 'lookup',
    description: 'read-only',
    parameters: key,
    mode: 'parallel',
    execute: ({ key }) => `found ${key}`,
  });
  const charge = defineTool({
    name: 'charge',
    description: 'a side effect that must not run twice',
    parameters: key,
    mode: 'exclusive',
    execute: async ({ key }, ctx) => {
      const file = o.ledger ? join(o.ledger, `${process.pid}.txt`) : undefined;
      if (file) appendFileSync(file, `START ${ctx.sessionId} ${ctx.idempotencyKey} ${process.pid}\n`);
      if (o.toolMs > 0) await new Promise((r) => setTimeout(r, o.toolMs));
      if (file) appendFileSync(file, `END ${ctx.sessionId} ${ctx.idempotencyKey} ${process.pid}\n`);
      return `charged ${key}`;
    },
  });
  return {
    tools: [lookup, charge],
    model: toolLoopModel({ steps: o.steps, toolsPerStep: 2, tools: ['lookup', 'charge'], latencyMs: o.latencyMs }),
  };
}

/**
 * The store as a paused worker sees it: the first head read after a `charge` intent returns only
 * `ms` after the read itself, and every work-store call (lease renewals included) made meanwhile
 * waits for the pause to end, as a process stopped right after its fence read would.
 */
function stallAfterIntent(store: EventStore, ms: number): EventStore {
  let armed: string | undefined;
  let pause: Promise<void> | undefined;
  const through = <T extends object>(target: T, wrap: (prop: string | symbol, v: unknown) => unknown): T =>
    new Proxy(target, {
      get(t, prop, receiver) {
        const v = Reflect.get(t, prop, receiver) as unknown;
        return wrap(prop, typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v);
      },
    });
  const work =
    store.work &&
    through(store.work, (_prop, v) =>
      typeof v === 'function' ? async (...a: unknown[]) => (await pause, (v as (...b: unknown[]) => unknown)(...a)) : v,
    );
  return through(store, (prop, v) => {
    if (prop === 'work') return work;
    if (prop === 'writerEpochNow') return undefined; // fence reads go through getHead, where the pause is
    if (prop === 'append') {
      return async (...a: Parameters<EventStore['append']>) => {
        const records = await store.append(...a);
        if (!pause && records.some((r) => r.type === 'tool/call' && r.payload.name === 'charge')) armed = a[0];
        return records;
      };
    }
    if (prop === 'getHead') {
      return async (sessionId: string) => {
        const head = await store.getHead(sessionId);
        if (armed === sessionId && !pause) {
          pause = new Promise((r) => setTimeout(r, ms));
          say(`STALLED ${sessionId}`);
          await pause;
        }
        return head;
      };
    }
    return v;
  });
}

async function worker(): Promise<void> {
  const ledger = flags.get('ledger');
  if (ledger) mkdirSync(ledger, { recursive: true });
  const opened = openStore(storeArg!);
  const store = flags.has('stall-after-intent-ms') ? stallAfterIntent(opened, num('stall-after-intent-ms', 0)) : opened;
  const concurrency = num('concurrency', 16);
  // the serve bench's counters (bench/serve-probe.ts): `PROBE <json>` on stdin's `PROBE`
  const probe = flags.has('probe') ? (await import('../../bench/serve-probe.js')).workerProbe(store, concurrency) : undefined;
  const agent = () =>
    serveAgent({ steps: num('steps', 2), latencyMs: num('latency', 5), toolMs: num('tool-ms', 10), ...(ledger ? { ledger } : {}) });
  const runtime = createRuntime({ store, ...agent() });
  const serveOptions = { concurrency, leaseMs: num('lease-ms', 2000), pollMs: num('poll-ms', 200), shutdownGraceMs: num('grace-ms', 2000) };
  // `--old-serve=<file>`: the serve before the worker machine (bench/serve-old.ts), for the bench's old-against-new rows
  const old = flags.has('old-serve') ? await import('../../bench/serve-old.js') : undefined;
  const oldServe = old ? await old.loadOldServe(flags.get('old-serve')!) : undefined;
  const serveOf = (rt: Runtime, st: EventStore) => (o: ServeOptions) => (old && oldServe ? old.serveOld(oldServe, rt, st, o) : rt.serve(o));
  // the bench's warm-up: this process serves `--warm` sessions of a store of its own before READY
  if (flags.has('warm')) {
    const warmSpec = storeArg!.startsWith('pg:') ? `${storeArg}_w${process.pid}` : `${storeArg}-w${process.pid}`;
    const warmStore = openStore(warmSpec);
    const warmRuntime = createRuntime({ store: warmStore, ...agent() });
    await serveUntilSettled(warmRuntime, 'w', num('warm', 0), serveOptions, serveOf(warmRuntime, warmStore));
  }
  if (flags.has('wait-go')) {
    say('READY');
    await nextLine((l) => l === 'GO');
  }
  probe?.start();
  const handle = serveOf(runtime, store)(serveOptions);
  if (probe) {
    handle.subscribe((e) => probe.onEvent(e));
    void nextLine((l) => l === 'PROBE').then(async () => say(`PROBE ${JSON.stringify(await probe.report())}`));
  }
  handle.subscribe((e) => {
    if (e.type === 'error') say(`EV error ${e.sessionId ?? '-'} ${e.message.replace(/\s+/g, ' ').slice(0, 300)}`);
    else if (e.type === 'lease_lost') say(`EV lease_lost ${e.sessionId} ${e.reason}`);
    else if (e.type !== 'applied' || flags.has('verbose')) say(`EV ${e.type} ${'sessionId' in e ? e.sessionId : '-'}`);
  });
  process.on('SIGTERM', () => {
    void (async () => {
      await handle.stop();
      await runtime.close();
      say('STOPPED');
      process.exit(0);
    })();
  });
  if (!flags.has('wait-go')) say('READY');
}

/**
 * Submits one input to each of sessions `<prefix>0..<prefix><n-1>` (50 at a time), then serves
 * them (with `serve`, `runtime.serve` unless given) until every one was released; stops serving
 * and closes the runtime.
 */
export async function serveUntilSettled(
  runtime: Runtime,
  prefix: string,
  n: number,
  options: ServeOptions,
  serve: (options: ServeOptions) => ServeHandle = (o) => runtime.serve(o),
): Promise<void> {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}${i}`);
  for (let i = 0; i < ids.length; i += 50) {
    await Promise.all(
      ids.slice(i, i + 50).map((sid) => runtime.submit(sid, { kind: 'input', inputId: `${sid}-in`, mode: 'follow_up', message: sid })),
    );
  }
  const handle = serve(options);
  let released = 0;
  await new Promise<void>((resolve) => {
    if (n === 0) resolve();
    handle.subscribe((e) => {
      if (e.type === 'released' && ++released >= n) resolve();
    });
  });
  await handle.stop();
  await runtime.close();
}

async function feed(): Promise<void> {
  const store = openStore(storeArg!, { maxConnections: 4 });
  const runtime = createRuntime({ store, ...serveAgent({ steps: 1, latencyMs: 0, toolMs: 0 }) });
  const n = num('sessions', 10);
  const wave = async (k: number) => {
    for (let i = 0; i < n; i += 20) {
      await Promise.all(
        Array.from({ length: Math.min(20, n - i) }, async (_, j) => {
          const r = await runtime.submit(`s${i + j}`, {
            kind: 'input',
            inputId: `s${i + j}-in${k}`,
            mode: 'follow_up',
            message: `m${i + j}.${k}`,
          });
          if (r.status !== 'accepted') say(`REFUSED ${r.entryId} ${r.status} ${r.reason ?? ''}`);
        }),
      );
    }
    say(`FED ${k}`);
  };
  say('READY');
  await wave(0);
  await nextLine((l) => l === 'WAVE');
  await wave(1);
  await nextLine((l) => l === 'EXIT');
  await runtime.close();
  process.exit(0);
}

if (mode === 'worker') await worker();
else if (mode === 'feed') await feed();
