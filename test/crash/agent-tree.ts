/**
 * The three-level agent tree of the SIGKILL tests (test/crash/agent-tree.test.ts, scripts/agent-tree-torture.ts):
 * an orchestrator (the default agent) calls the researcher agentTool twice in one step (parallel);
 * each researcher writes its entry with `ledger` (exclusive, side-effecting: one line per call's
 * idempotency key in a ledger file, fsynced) and answers. Models are functions of the request,
 * so every life of the tree asks the same. The tree runs under a `maxCost` budget (the root's, and
 * each child's spends from it): every model call bills its usage to a usage ledger (fsynced) before
 * it answers, so a call killed mid-answer is billed and not logged. Invariant checks over the LMDB
 * logs and the ledgers. This module must not import vitest: the child imports it too.
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
import type { Usage } from '../../src/contracts/message.js';
import { addDecimal, decimalAtLeast } from '../../src/contracts/budget.js';
import { tokenPrice } from './budget-pricing.js';

export const ROOT = 's';
export const RUN = 'r';
export const CALLS = ['c1', 'c2'] as const;
export const childOf = (callId: string) => `${ROOT}/${RUN}/1/${callId}`;
const INPUTS: Record<(typeof CALLS)[number], string> = { c1: 'alpha', c2: 'beta' };

const lastRole = (r: ModelRequest) => r.messages.at(-1)?.role;
const firstUser = (r: ModelRequest) => String(r.messages.find((m) => m.role === 'user')?.content ?? '');

/** The tree's budget: the whole tree's spending (its crashed calls' reservations included) stays within it. */
export const TREE_MAX_COST = '50';
/** What each model call of the tree reports (and bills). */
const CALL_USAGE: Usage = { inputTokens: 10, outputTokens: 5 };
const usageLedgerOf = (ledger: string) => `${ledger}-usage`;

/** Appends `line` to `path` and fsyncs it before returning. */
function appendDurably(path: string, line: string): void {
  appendFileSync(path, `${line}\n`);
  const fd = openSync(path, 'r');
  fsyncSync(fd);
  closeSync(fd);
}

/** `step`, with its call billed (fsynced to the usage ledger) before the model answers. */
const billed =
  (ledger: string, step: ScriptedStep): ScriptedStep =>
  (r) => {
    appendDurably(usageLedgerOf(ledger), `${CALL_USAGE.inputTokens} ${CALL_USAGE.outputTokens}`);
    const s = typeof step === 'function' ? step(r) : step;
    return { ...(s as object), usage: CALL_USAGE } as ScriptedStep;
  };

/** The tree's agents and models, and its pricing and budget; `ledger` is the path of the ledger file. */
export function agentTree(ledger: string, delayMs = 15) {
  const ledgerTool = defineTool({
    name: 'ledger',
    description: 'Writes an entry to the ledger',
    parameters: z.object({ entry: z.string() }),
    resources: ({ entry }) => [`ledger:${entry}`],
    execute: ({ entry }, ctx) => {
      appendDurably(ledger, `${ctx.idempotencyKey} ${entry}`);
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
    // a call reserves at most 20 output tokens (priced with its input estimate)
    model: Object.assign(scriptedModel([billed(ledger, childStep)], { loop: true, modelId: 'researcher-model' }), { maxOutputTokens: 20 }),
    tools: [ledgerTool],
  });
  const model = Object.assign(scriptedModel([billed(ledger, parentStep)], { loop: true, modelId: 'orchestrator-model' }), {
    maxOutputTokens: 20,
  });
  return {
    model,
    tools: [agentTool(researcher, { mode: 'parallel' })],
    pricing: tokenPrice,
    budget: { maxCost: TREE_MAX_COST },
  };
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
  out.push(...spendingViolations(ledger, root, await Promise.all(CALLS.map((c) => logOf(store, childOf(c))))));
  return out;
}

/** What a log counts against the budget: reported usage priced, and calls counted at their reservation. */
function loggedCost(log: readonly EventRecord[]): string {
  let cost = '0';
  for (const e of log) {
    const p = e.payload as Record<string, any>;
    if (p.copiedFrom !== undefined) continue;
    if ((e.type === 'assistant/message' || e.type === 'compaction') && p.usage) cost = addDecimal(cost, tokenPrice(p.usage));
    if (e.type === 'assistant/attempt' && p.counted === 'reservation') cost = addDecimal(cost, p.reserved.cost);
    if (e.type === 'run/start' && p.recoveredReservation) cost = addDecimal(cost, p.recoveredReservation.cost);
  }
  return cost;
}

const sameDecimal = (a: string, b: string) => decimalAtLeast(a, b) && decimalAtLeast(b, a);

/**
 * The tree's budget: what the models billed (the usage ledger, crashed calls included) and what the
 * logs count (every log's own calls) stay within maxCost, the logs count no less than was billed,
 * and the root's settled result counts each child's spending exactly once (its cost and counted
 * reservations are the sum of every log's own).
 */
function spendingViolations(ledger: string, root: readonly EventRecord[], children: readonly EventRecord[][]): string[] {
  const out: string[] = [];
  const path = usageLedgerOf(ledger);
  const lines = existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : [];
  const bill = lines.reduce((sum, l) => {
    const [i, o] = l.split(' ').map(Number);
    return addDecimal(sum, tokenPrice({ inputTokens: i!, outputTokens: o! }));
  }, '0');
  const tree = [root, ...children].reduce((sum, log) => addDecimal(sum, loggedCost(log)), '0');
  if (!decimalAtLeast(TREE_MAX_COST, bill)) out.push(`the models billed ${bill}, crossing maxCost ${TREE_MAX_COST}`);
  if (!decimalAtLeast(TREE_MAX_COST, tree)) out.push(`the logs count ${tree}, crossing maxCost ${TREE_MAX_COST}`);
  if (!decimalAtLeast(tree, bill)) out.push(`the logs count ${tree}, less than the ${bill} billed`);
  const end = root.filter((e) => e.type === 'run/end' && e.payload.runId === RUN).at(-1)?.payload.result as
    | { cost?: string; counted?: { cost: string } }
    | undefined;
  const rolled = addDecimal(end?.cost ?? '0', end?.counted?.cost ?? '0');
  if (!sameDecimal(rolled, tree)) out.push(`the root's result counts ${rolled} (cost and counted), the tree's logs ${tree}`);
  return out;
}
