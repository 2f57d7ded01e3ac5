/**
 * Child program for test/crash/typed-output-recovery.test.ts: a run with an output schema on an
 * LMDB log, in a real process.
 *
 *   node --import tsx test/crash/typed-output-child.ts <first|recover> <dir>
 *
 * `first` SIGKILLs itself right after the append holding `final/message` is durable (before its
 * delivery). `recover` opens the session with a model that has no answer left (any call fails
 * the run) and a delivery owner, then executes the same request again.
 * Protocol lines: `DELIVERED <json>`, `RESULT <json>`, `WAITED <json>`, `MODELCALLS <n>`, `KILL <what>`, `DONE`, `ERROR <message>`.
 */
import { join } from 'node:path';
import { z } from 'zod';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { scriptedModel } from '../../src/providers/scripted.js';
import { createRuntime } from '../../src/runtime/runtime.js';
import { runChild, say } from './child-util.js';

const [phase, dir] = process.argv.slice(2) as ['first' | 'recover', string];
const Invoice = z.object({ number: z.string(), total: z.number(), lines: z.array(z.object({ item: z.string(), amount: z.number() })) });

/** Kills the process right after the first durable append holding a `final/message`. */
function killingStore(inner: EventStore): EventStore {
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'append') {
        return async (...args: Parameters<EventStore['append']>) => {
          const records = await target.append(...args);
          if (records.some((r) => r.type === 'final/message')) {
            say('KILL after final/message');
            process.kill(process.pid, 'SIGKILL');
            for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
          }
          return records;
        };
      }
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

async function main(): Promise<void> {
  const inner = lmdbStore({ path: join(dir, 'db') });
  const answer = { number: 'INV-7', total: 12.5, lines: [{ item: 'tea', amount: 12.5 }] };
  const model = scriptedModel(phase === 'first' ? [JSON.stringify(answer)] : []);
  const delivery = { idempotent: true, deliver: async (f: { output?: unknown }) => say(`DELIVERED ${JSON.stringify(f.output)}`) };
  const runtime = createRuntime({ store: phase === 'first' ? killingStore(inner) : inner, model, delivery });
  const session = await runtime.openSession('s');
  const r = await session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'extract the invoice', output: Invoice });
  say(`RESULT ${JSON.stringify({ status: r.status, output: r.output, finalMessage: r.finalMessage })}`);
  const waited = await runtime.waitForResult('s', 'r');
  say(`WAITED ${JSON.stringify({ status: waited.status, output: waited.output })}`);
  say(`MODELCALLS ${model.requests.length}`);
  await runtime.close();
  say('DONE');
}

runChild(main);
