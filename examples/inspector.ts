/**
 * Watching the live machines with the Stately inspector (`@statelyai/inspect`). The runtime's
 * `inspect` option receives XState inspection events from every actor: the session machine, each
 * run machine, its toolBatch machine, and the actors they invoke (one per effect, such as
 * callModel or commitIntent, and one per tool call).
 *
 * The agent's run suspends for an approval and is answered (approve) by a second attempt. The
 * example prints the states each machine passed through (collected by `stateTrace`,
 * examples/state-trace.ts, from the same inspection events), one line per actor:
 *
 *   session: idle → preparing → executing → finalizing → suspended → preparing → … → idle → closing → closed
 *   run #1: starting → callingModel → committingIntent → runningTools → committingResults → … → ending → done
 *   toolBatch #1: runningParallel → done
 *   run #2: starting → runningTools → committingResults → callingModel → verifyingFinal → … → ending → done
 *   …
 *
 *   npx tsx examples/inspector.ts [events.jsonl]   # offline: a local adapter writes JSON lines (default: in a new folder of the OS temp dir; printed)
 *   npx tsx examples/inspector.ts --serve [--port 8080] [--tool-delay 400]   # live: a local page in your browser (port 0: any free one)
 *
 * `--serve` opens a local page (examples/inspector-page.ts: node:http and Server-Sent Events, no
 * network, no hosted inspector) showing the session, run and toolBatch actors' state values live;
 * the run waits in `suspended` until you press Approve there. Both modes need nothing but this process.
 */
import { appendFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import type { InspectionEvent } from 'xstate';
import { z } from 'zod';
import { createRuntime, defineTool, memoryStore, scriptedModel } from 'actorloop';
import { startInspectorPage } from './inspector-page.js';
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

/** How the inspected agent paces itself for a watcher. */
export interface InspectedAgentOptions {
  /** Each tool call takes this long (default 0), so a watcher sees the batches run. */
  toolDelayMs?: number;
  /** Awaited while the run is suspended, before the `respond` that approves the transfer. */
  beforeApproving?: (what: string) => Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs an agent whose run suspends for an approval, with `inspect` attached: a parallel tool batch
 * (two lookups), then a transfer that needs approval (the run suspends), a `respond` attempt that
 * approves it (the transfer runs), and the answer.
 */
export async function runInspectedAgent(inspect: (e: InspectionEvent) => void, options: InspectedAgentOptions = {}): Promise<InspectedRun> {
  const delay = options.toolDelayMs ?? 0;
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks a word up',
    parameters: z.object({ word: z.string() }),
    mode: 'parallel',
    execute: async ({ word }) => {
      await sleep(delay);
      return `${word}: a word`;
    },
  });
  const transfer = defineTool({
    name: 'transfer',
    description: 'Transfers money to an account',
    parameters: z.object({ to: z.string(), amount: z.number().positive() }),
    needsApproval: true,
    execute: async ({ to, amount }) => {
      await sleep(delay);
      return `transferred ${amount} to ${to}`;
    },
  });
  const model = scriptedModel([
    {
      toolCalls: [
        { name: 'lookup', arguments: { word: 'actor' } },
        { name: 'lookup', arguments: { word: 'loop' } },
      ],
    },
    { toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME', amount: 250 } }] },
    'Looked up actor and loop, and paid ACME 250.',
  ]);
  const runtime = createRuntime({ store: memoryStore(), model, tools: [lookup, transfer], inspect });
  const session = await runtime.openSession('inspected');
  const first = await session.execute({
    kind: 'prompt',
    runId: 'r1',
    attemptId: 'a1',
    message: 'Look up actor and loop, then pay ACME 250',
  });
  const pending = first.pendingRequest;
  if (pending?.kind !== 'approval') throw new Error(`expected an approval request, got ${first.outcome} ${first.status}`);
  await options.beforeApproving?.(
    `run r1 is suspended: ${pending.calls.map((c) => `${c.name} ${JSON.stringify(c.arguments)}`).join(', ')} needs approval`,
  );
  const decisions = Object.fromEntries(pending.calls.map((c) => [c.callId, 'approve' as const]));
  const second = await session.execute({
    kind: 'respond',
    runId: 'r1',
    attemptId: 'a2',
    questionId: pending.questionId,
    answer: { decisions },
  });
  await runtime.close();
  return { first: first.outcome, outcome: second.outcome };
}

/**
 * The whole number after `name` on the command line (`fallback` without the flag), from 0 to
 * `max`; anything else ends the example with one line naming the flag and the value, exit 2.
 */
function flag(name: string, fallback: number, max: number, range: string): number {
  const at = process.argv.indexOf(name);
  if (at < 0) return fallback;
  const text = process.argv[at + 1] ?? '';
  if (/^\d+$/.test(text) && Number(text) <= max) return Number(text);
  console.error(`inspector.ts: ${name}: expected a whole number ${range} (got ${JSON.stringify(text)})`);
  process.exit(2);
}

async function main(): Promise<void> {
  const trace = stateTrace();
  const serve = process.argv.includes('--serve');
  if (serve) {
    const page = await startInspectorPage({ port: flag('--port', 8080, 65535, '0–65535') });
    console.log(`live machines on ${page.url} — open it in a browser; the run waits there for your approval`);
    await runInspectedAgent(
      (e) => {
        trace.inspect(e);
        page.inspect(e);
      },
      { toolDelayMs: flag('--tool-delay', 400, 600_000, 'of milliseconds, 0–600000'), beforeApproving: (what) => page.approval(what) },
    );
    console.log('outcome: completed; states each machine passed through:');
    for (const line of trace.lines()) console.log(`  ${line}`);
    console.log('the page stays up; Ctrl-C to stop');
    process.on('SIGINT', () => void page.close().then(() => process.exit(0)));
    return;
  }
  const file = process.argv[2] ?? join(mkdtempSync(join(tmpdir(), 'actorloop-inspector-')), 'inspector-events.jsonl');
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
