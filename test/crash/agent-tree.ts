/**
 * The three-level agent tree of the SIGKILL tests (test/crash/agent-tree.test.ts, scripts/agent-tree-torture.ts):
 * an orchestrator (the default agent) calls the researcher agentTool twice in one step (parallel);
 * each researcher writes its entry with `ledger` (exclusive, side-effecting: one line per call's
 * idempotency key in a ledger file, fsynced) and answers. Models are functions of the request,
 * so every life of the tree asks the same. Invariant checks over the LMDB log and the ledger.
 * This module must not import vitest: the child imports it too.
 */
import { appendFileSync, closeSync, existsSync, fsyncSync, openSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import type { EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { scriptedModel, type ScriptedStep } from '../../src/providers/scripted.js';
import type { ModelRequest } from '../../src/contracts/model.js';
import { agentTool } from '../../src/tools/agent-tool.js';
import { defineAgent } from '../../src/tools/define-agent.js';
import { defineTool } from '../../src/tools/define-tool.js';

export const ROOT = 's';
export const RUN = 'r';
export const CALLS = ['c1', 'c2'] as const;
export const childOf = (callId: string) => `${ROOT}/${RUN}/1/${callId}`;
const INPUTS: Record<(typeof CALLS)[number], string> = { c1: 'alpha', c2: 'beta' };

const lastRole = (r: ModelRequest) => r.messages.at(-1)?.role;
const firstUser = (r: ModelRequest) => String(r.messages.find((m) => m.role === 'user')?.content ?? '');

/** The tree's agents and models; `ledger` is the path of the ledger file. */
export function agentTree(ledger: string, delayMs = 15) {
  const ledgerTool = defineTool({
    name: 'ledger',
    description: 'Writes an entry to the ledger',
    parameters: z.object({ entry: z.string() }),
    resources: ({ entry }) => [`ledger:${entry}`],
    execute: ({ entry }, ctx) => {
      appendFileSync(ledger, `${ctx.idempotencyKey} ${entry}\n`);
      const fd = openSync(ledger, 'r');
      fsyncSync(fd);
      closeSync(fd);
      return `written ${entry}`;
    },
    // the ledger tells whether the call took effect: it holds the call's key
    reconcile: ({ entry }, ctx) =>
      ledgerKeys(ledger).includes(ctx.idempotencyKey) ? { kind: 'completed', content: `written ${entry}` } : undefined,
  });
  const childStep: ScriptedStep = (r) =>
    lastRole(r) === 'tool'
      ? { text: `noted ${firstUser(r)}`, delayMs }
      : { toolCalls: [{ id: 'l1', name: 'ledger', arguments: { entry: firstUser(r) } }], delayMs };
  const parentStep: ScriptedStep = (r) =>
    lastRole(r) === 'tool'
      ? {
          text: `summary: ${r.messages
            .filter((m) => m.role === 'tool')
            .map((m) => m.content)
            .join(' | ')}`,
          delayMs,
        }
      : { toolCalls: CALLS.map((id) => ({ id, name: 'researcher', arguments: { input: INPUTS[id] } })), delayMs };
  const researcher = defineAgent({
    name: 'researcher',
    instructions: 'Write the entry to the ledger, then say what you noted.',
    model: scriptedModel([childStep], { loop: true, modelId: 'researcher-model' }),
    tools: [ledgerTool],
  });
  const model = scriptedModel([parentStep], { loop: true, modelId: 'orchestrator-model' });
  return { model, tools: [agentTool(researcher, { mode: 'parallel' })] };
}

/** The keys written to the ledger, one per line, in order. */
export function ledgerKeys(ledger: string): string[] {
  if (!existsSync(ledger)) return [];
  return readFileSync(ledger, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => l.split(' ')[0]!);
}

async function logOf(store: EventStore, id: string): Promise<EventRecord[]> {
  const out: EventRecord[] = [];
  for await (const e of store.readEvents(id)) out.push(e);
  return out;
}

/**
 * What must hold once the tree's run settled, however often it was killed: the root run
 * succeeded; each child's answer is committed in the root exactly once; each child's run was
 * started once and settled; no ledger entry is written twice (no silent duplicate at any level).
 * Returns the violations (empty when it holds).
 */
export async function treeViolations(store: EventStore, ledger: string): Promise<string[]> {
  const out: string[] = [];
  const root = await logOf(store, ROOT);
  const ends = root.filter((e) => e.type === 'run/end' && e.payload.runId === RUN).map((e) => String(e.payload.status));
  if (ends.at(-1) !== 'succeeded') out.push(`root run ended ${JSON.stringify(ends)}`);
  for (const callId of CALLS) {
    const results = root.filter((e) => e.type === 'tool/result' && e.payload.callId === callId);
    if (results.length !== 1) out.push(`root has ${results.length} results of ${callId}`);
    const child = await logOf(store, childOf(callId));
    const prompts = child.filter((e) => e.type === 'run/start' && e.payload.kind === 'prompt');
    if (prompts.length !== 1) out.push(`child ${callId} started ${prompts.length} times`);
    const childEnds = child.filter((e) => e.type === 'run/end').map((e) => String(e.payload.status));
    if (childEnds.at(-1) !== 'succeeded') out.push(`child ${callId} ended ${JSON.stringify(childEnds)}`);
    const content = (results[0]?.payload.outcome as { content?: string } | undefined)?.content ?? '';
    if (!content.startsWith(`noted ${INPUTS[callId]}`)) out.push(`root's result of ${callId} is ${JSON.stringify(content)}`);
  }
  const keys = ledgerKeys(ledger);
  if (new Set(keys).size !== keys.length) out.push(`a ledger entry was written twice: ${keys.join(', ')}`);
  return out;
}
