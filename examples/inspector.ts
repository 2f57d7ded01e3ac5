/**
 * Watching the live machines with the Stately inspector (`@statelyai/inspect`). The runtime's
 * `inspect` option receives XState inspection events from every actor: the session machine, each
 * run machine, its toolBatch machine, and the callback actors they talk to (the run's effects
 * actor, one per tool call).
 *
 * The agent's run suspends for an approval and is answered (approve) by a second attempt. The
 * example prints the states each machine passed through (collected by `stateTrace`,
 * examples/state-trace.ts, from the same inspection events), one line per actor:
 *
 *   session: idle → executing → idle → executing → idle → closed
 *   run #1: starting → stepping → runningTools → committingResults → stepping → ending → done
 *   …
 *
 *   npx tsx examples/inspector.ts [events.jsonl]   # offline: a local adapter writes JSON lines
 *   npx tsx examples/inspector.ts --serve          # live: the Stately inspector in your browser
 *
 * `--serve` starts the package's local WebSocket bridge (createInspectorServer, port 8080) and
 * connects with createWebSocketInspector; the page it opens embeds the inspector UI from
 * stately.ai, so that browser needs the network. The default mode needs nothing but this process.
 */
import { appendFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { createInspector, createWebSocketInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import type { InspectionEvent } from 'xstate';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel } from 'actorloop';
import { stateTrace } from './state-trace.js';

/** The machine id in an `@xstate.actor` event's definition (its config as JSON), if any. */
function machineId(definition: string | undefined): string | undefined {
  try {
    const id = definition ? (JSON.parse(definition) as { id?: unknown }).id : undefined;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * An inspector adapter that keeps every event in a local sink: a JSON-lines file (if given) and
 * per-machine counts. Snapshot events name the actor by its sessionId, so the machine id each
 * `@xstate.actor` event announces (session, run, toolBatch; a callback actor's id) is
 * remembered.
 */
export function localAdapter(file?: string) {
  const names = new Map<string, string>();
  const snapshotsByMachine = new Map<string, number>();
  if (file) writeFileSync(file, '');
  return {
    snapshotsByMachine,
    send(event: StatelyInspectionEvent): void {
      if (event.type === '@xstate.actor') names.set(event.sessionId, machineId(event.definition) ?? event.name);
      if (event.type === '@xstate.snapshot') {
        const name = names.get(event.sessionId) ?? event.sessionId;
        snapshotsByMachine.set(name, (snapshotsByMachine.get(name) ?? 0) + 1);
      }
      if (file) appendFileSync(file, `${JSON.stringify(event)}\n`);
    },
  };
}

/** What the inspected agent's two attempts came back with. */
export interface InspectedRun {
  /** The prompt's attempt: `suspended`, waiting for the transfer's approval. */
  first: string;
  /** The respond attempt that approved it: `completed`. */
  outcome: string;
}

/**
 * Runs an agent whose run suspends for an approval, with `inspect` attached: a parallel tool batch
 * (two lookups), then a transfer that needs approval (the run suspends), a `respond` attempt that
 * approves it (the transfer runs), and the answer.
 */
export async function runInspectedAgent(inspect: (e: InspectionEvent) => void): Promise<InspectedRun> {
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks a word up',
    parameters: z.object({ word: z.string() }),
    mode: 'parallel',
    execute: async ({ word }) => `${word}: a word`,
  });
  const transfer = defineTool({
    name: 'transfer',
    description: 'Transfers money to an account',
    parameters: z.object({ to: z.string(), amount: z.number().positive() }),
    needsApproval: true,
    execute: ({ to, amount }) => `transferred ${amount} to ${to}`,
  });
  const model = scriptedModel([
    { toolCalls: [{ name: 'lookup', arguments: { word: 'actor' } }, { name: 'lookup', arguments: { word: 'loop' } }] },
    { toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME', amount: 250 } }] },
    'Looked up actor and loop, and paid ACME 250.',
  ]);
  const runtime = createRuntime({ store: memoryStore(), model, tools: [lookup, transfer], inspect });
  const session = await runtime.openSession('inspected');
  const first = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'Look up actor and loop, then pay ACME 250' });
  const pending = first.pendingRequest;
  if (pending?.kind !== 'approval') throw new Error(`expected an approval request, got ${first.outcome} ${first.status}`);
  const decisions = Object.fromEntries(pending.calls.map((c) => [c.callId, 'approve' as const]));
  const second = await session.execute({ kind: 'respond', runId: 'r1', attemptId: 'a2', questionId: pending.questionId, answer: { decisions } });
  await runtime.close();
  return { first: first.outcome, outcome: second.outcome };
}

async function main(): Promise<void> {
  const trace = stateTrace();
  const serve = process.argv.includes('--serve');
  if (serve) {
    const { createInspectorServer } = await import('@statelyai/inspect/server');
    const server = createInspectorServer({ port: 8080 });
    const inspector = createWebSocketInspector({ url: 'ws://localhost:8080' });
    console.log('inspector bridge on http://localhost:8080 — running the agent; Ctrl-C to stop');
    await runInspectedAgent((e) => {
      trace.inspect(e);
      inspector.inspect.next?.(e);
    });
    for (const line of trace.lines()) console.log(line);
    process.on('SIGINT', () => {
      inspector.stop();
      server.stop();
      process.exit(0);
    });
    return;
  }
  const file = process.argv[2] ?? 'inspector-events.jsonl';
  const adapter = localAdapter(file);
  const inspector = createInspector(adapter);
  const run = await runInspectedAgent((e) => {
    trace.inspect(e);
    inspector.inspect.next?.(e);
  });
  await new Promise((r) => setTimeout(r, 50)); // the inspector converts events on the next tick
  inspector.stop();
  console.log(`first attempt: ${run.first} (the transfer waits for approval); after approving it:`);
  console.log(`outcome: ${run.outcome}`);
  console.log('states each machine passed through (a run machine per attempt):');
  for (const line of trace.lines()) console.log(`  ${line}`);
  for (const [name, n] of adapter.snapshotsByMachine) console.log(`snapshots of ${name}: ${n}`);
  console.log(`inspection events written to ${file}`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
