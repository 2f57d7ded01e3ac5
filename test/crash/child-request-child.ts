/**
 * Child program of test/crash/child-request.test.ts: one life of a parent whose payer sub-agent
 * asks approval for its `charge` (exclusive, fsynced ledger, reconciled from the ledger), on an
 * LMDB log, in a real process.
 *
 *   node --import tsx test/crash/child-request-child.ts <dir> ask
 *   node --import tsx test/crash/child-request-child.ts <dir> respond <killAt>
 *   node --import tsx test/crash/child-request-child.ts <dir> finish
 *
 * `ask` prompts the parent and, suspended on the child's request, prints it and waits (to be
 * killed). `respond` approves the charge through the parent, SIGKILLing itself right after the
 * durable append `killAt` names: `parent-answered` (the parent's respond run/start), `child-answered`
 * (the child's respond commit, with the charge's intent), `child-charged` (the charge's result),
 * `child-end` (the child's settled run/end), `parent-result` (the parent's tool/result), or `none`.
 * `finish` answers the parent if it still waits (printing the request it found), else continues it.
 * Protocol lines: `SUSPENDED <json>`, `PENDING <json>`, `KILL <what>`, `RESULT <json>`, `DONE`, `ERROR <message>`.
 */
import { appendFileSync, closeSync, existsSync, fsyncSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { EventRecord } from '../../src/contracts/events.js';
import type { ModelRequest } from '../../src/contracts/model.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { scriptedModel, type ScriptedStep } from '../../src/providers/scripted.js';
import { createRuntime } from '../../src/runtime/runtime.js';
import { agentTool } from '../../src/tools/agent-tool.js';
import { defineAgent } from '../../src/tools/define-agent.js';
import { defineTool } from '../../src/tools/define-tool.js';
import { runChild, say } from './child-util.js';

export const ROOT = 's';
export const RUN = 'r';
export const CHILD_ID = `${ROOT}/${RUN}/1/c1`;
const ANSWER = { decisions: { k1: 'approve' } };

const [dir, mode, killAt = 'none'] = process.argv.slice(2) as [string, string, string?];
const ledger = join(dir, 'ledger');
const ledgerKeys = () => (existsSync(ledger) ? readFileSync(ledger, 'utf8').split('\n').filter(Boolean) : []);

const KILLS: Record<string, (sessionId: string, r: EventRecord) => boolean> = {
  'parent-answered': (id, r) => id === ROOT && r.type === 'run/start' && r.payload.answered !== undefined,
  'child-answered': (id, r) => id === CHILD_ID && r.type === 'run/start' && r.payload.kind === 'respond',
  'child-charged': (id, r) => id === CHILD_ID && r.type === 'tool/result' && r.payload.callId === 'k1',
  'child-end': (id, r) => id === CHILD_ID && r.type === 'run/end' && r.payload.status === 'succeeded',
  'parent-result': (id, r) => id === ROOT && r.type === 'tool/result' && r.payload.callId === 'c1',
};

function killingStore(inner: EventStore, when: ((id: string, r: EventRecord) => boolean) | undefined): EventStore {
  if (!when) return inner;
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'append') {
        return async (...args: Parameters<EventStore['append']>) => {
          const records = await target.append(...args);
          if (records.some((r) => when(args[0], r))) {
            say(`KILL ${killAt}`);
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

const lastTool = (r: ModelRequest) => (r.messages.at(-1)?.role === 'tool' ? String(r.messages.at(-1)!.content) : undefined);

function tree() {
  const charge = defineTool({
    name: 'charge',
    description: 'Charges an amount',
    parameters: z.object({ amount: z.number() }),
    mode: 'exclusive',
    needsApproval: true,
    execute: ({ amount }, ctx) => {
      appendFileSync(ledger, `${ctx.idempotencyKey}\n`);
      const fd = openSync(ledger, 'r');
      fsyncSync(fd);
      closeSync(fd);
      return `charged ${amount}`;
    },
    reconcile: ({ amount }, ctx) =>
      ledgerKeys().includes(ctx.idempotencyKey) ? { kind: 'completed', content: `charged ${amount}` } : undefined,
  });
  const childStep: ScriptedStep = (r) =>
    lastTool(r) !== undefined ? { text: `payer: ${lastTool(r)}` } : { toolCalls: [{ id: 'k1', name: 'charge', arguments: { amount: 5 } }] };
  const parentStep: ScriptedStep = (r) =>
    lastTool(r) !== undefined
      ? { text: `Paid: ${lastTool(r)}` }
      : { toolCalls: [{ id: 'c1', name: 'payer', arguments: { input: 'pay 5' } }] };
  const payer = defineAgent({ name: 'payer', instructions: 'Pay.', model: scriptedModel([childStep], { loop: true }), tools: [charge] });
  return { model: scriptedModel([parentStep], { loop: true }), tools: [agentTool(payer)] };
}

async function main(): Promise<void> {
  const store = killingStore(lmdbStore({ path: join(dir, 'db') }), KILLS[killAt]);
  const runtime = createRuntime({ store, ...tree() });
  const session = await runtime.openSession(ROOT);
  let r;
  if (mode === 'ask') {
    r = await session.execute({ kind: 'prompt', runId: RUN, attemptId: 'a1', message: 'pay 5' });
    say(`SUSPENDED ${JSON.stringify(r.pendingRequest)}`);
    await new Promise(() => {}); // waits for its answer until killed
  }
  const pending = session.pendingRequest;
  if (mode === 'finish' && pending) say(`PENDING ${JSON.stringify(pending)}`);
  if (mode === 'respond' || pending)
    r = await session.execute({ kind: 'respond', runId: RUN, questionId: pending!.questionId, answer: ANSWER });
  else r = await session.execute({ kind: 'continue', runId: RUN });
  say(`RESULT ${JSON.stringify({ status: r.status, finalMessage: r.finalMessage, uncertainCalls: r.uncertainCalls })}`);
  await runtime.close();
  say('DONE');
}

runChild(main);
