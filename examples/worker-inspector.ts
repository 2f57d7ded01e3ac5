/**
 * A serving worker's machines, seen through the runtime's `inspect` option: the worker
 * (`workerMachine`) and one held-session machine per session it claimed, beside the session
 * machines they drive. Two inputs to one session, the second submitted after the first run ended:
 * the worker claims the session, runs the input, releases it, and claims it again for the second.
 * It prints the states each machine passed through (examples/state-trace.ts), one line per actor:
 *
 *   worker: registering → serving.(claims.claiming, leases.waiting) → … → unregistering → stopped
 *   heldSession #1: opening → bound.waiting → bound.draining → … → releasing → released
 *
 *   npx tsx examples/worker-inspector.ts
 *
 * (`examples/inspector.ts --serve` shows a session's machines live on a local page.)
 */
import { pathToFileURL } from 'node:url';
import type { InspectionEvent } from 'xstate';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel, type ServeEvent } from 'actorloop';
import { stateTrace } from './state-trace.js';

/** Serves two inputs to one session with `inspect` attached; resolves with the serve events' types and the runs' outcomes. */
export async function runInspectedWorker(inspect: (e: InspectionEvent) => void): Promise<{ events: string[]; outcomes: string[] }> {
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks a word up',
    parameters: z.object({ word: z.string() }),
    mode: 'parallel',
    execute: async ({ word }) => `${word}: a word`,
  });
  const model = scriptedModel([
    { toolCalls: [{ name: 'lookup', arguments: { word: 'lease' } }] },
    'A lease is a claim that expires.',
    { toolCalls: [{ name: 'lookup', arguments: { word: 'epoch' } }] },
    'An epoch is a fencing token.',
  ]);
  const runtime = createRuntime({ store: memoryStore(), model, tools: [lookup], inspect });
  const worker = runtime.serve({ concurrency: 4, leaseMs: 3000, pollMs: 50 });
  const events: string[] = [];
  worker.subscribe((e: ServeEvent) => events.push(e.type));
  const outcomes: string[] = [];
  for (const [inputId, message] of [
    ['i1', 'What is a lease?'],
    ['i2', 'And an epoch?'],
  ] as const) {
    await runtime.submit('inspected', { kind: 'input', inputId, mode: 'follow_up', message });
    const result = await runtime.waitForResult('inspected', inputId, { signal: AbortSignal.timeout(10_000), pollMs: 20 });
    outcomes.push(result.outcome);
    while (worker.sessions.length > 0) await new Promise((r) => setTimeout(r, 10)); // released before the next input
  }
  await worker.stop();
  await runtime.close();
  return { events, outcomes };
}

async function main(): Promise<void> {
  const trace = stateTrace();
  const { events, outcomes } = await runInspectedWorker(trace.inspect);
  console.log(`outcomes: ${outcomes.join(', ')}`);
  console.log(`serve events: ${events.join(', ')}`);
  console.log("states the worker's machines passed through (a held session per claim), and the session machines they drove:");
  for (const line of trace.lines()) if (/^(worker|heldSession|session)\b/.test(line)) console.log(`  ${line}`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
