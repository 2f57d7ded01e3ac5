/**
 * The world outside an agent tree, as the simulator's tree family plays it (tree-simulate.ts): a
 * root model that asks sub-agents (`researcher`, a parallel agentTool; `auditor`, an exclusive
 * one) and writes its own ledger entries; child models that write ledger entries (`ledger`:
 * exclusive, reconcilable), stamp documents (`stamp`: exclusive, no reconcile) and look things up
 * (`lookup`: parallel), then answer. Models err, stall and answer late by seed; tools fail, hang
 * and complete after their process crashed. Every execution lands in the shared Ledgers.
 * Must not import vitest.
 */
import { z } from 'zod';
import { CancelledError, ProviderError } from '../../src/contracts/errors.js';
import type { ModelProvider, ModelRequest, ModelResponse } from '../../src/contracts/model.js';
import { defineAgent, type Agent } from '../../src/tools/define-agent.js';
import { defineTool, type AnyTool, type ToolContext } from '../../src/tools/define-tool.js';
import { conversationProblem, effectInWorld, reconcileFromLedger, type Ledgers, type ToolRun } from './outside.js';
import type { Watch } from './watch.js';
import type { Proc, World } from './world.js';

export interface TreeFaults {
  modelRetryable: number;
  modelStall: number;
  toolFail: number;
  toolLate: number;
  toolHang: number;
}

export const NO_TREE_FAULTS: TreeFaults = { modelRetryable: 0, modelStall: 0, toolFail: 0, toolLate: 0, toolHang: 0 };

export interface TreeOutside {
  world: World;
  ledgers: Ledgers;
  watch: Watch;
  faults: TreeFaults;
  nextCallId(): string;
  /** Rounds of agent calls the root makes before it answers (at most). */
  rootRounds: number;
  /** Told when a tool of a session starts (the hand-over tracker orders it among the commits). */
  onToolStart(sessionId: string, callId: string): void;
}

/** The sub-agents the root calls, and whether each is an exclusive agentTool. */
export const SUB_AGENTS = ['researcher', 'auditor'] as const;
export const AGENT_TOOL_MODE = { researcher: 'parallel', auditor: 'exclusive' } as const;

const cancelled = () => new CancelledError('model call cancelled');

/** Tool rounds since the newest user message, and that message's text. */
function since(req: ModelRequest): { rounds: number; prompt: string } {
  let rounds = 0;
  let i = req.messages.length - 1;
  for (; i >= 0 && req.messages[i]!.role !== 'user'; i--) if (req.messages[i]!.role === 'assistant') rounds++;
  const m = req.messages[i];
  return { rounds, prompt: typeof m?.content === 'string' ? m.content : '' };
}

/** A model of one agent in one process; `plan` says what it asks for in a tool round (empty: it answers). */
function treeModel(
  o: TreeOutside,
  proc: Proc,
  modelId: string,
  plan: (rounds: number, prompt: string) => { name: string; args: unknown }[],
  answer: (req: ModelRequest, prompt: string) => string,
): ModelProvider {
  const rng = o.world.rng;
  return {
    modelId,
    async call(req: ModelRequest): Promise<ModelResponse> {
      const problem = conversationProblem(req.messages);
      if (problem) o.ledgers.problems.push(`invalid conversation sent to the ${modelId} model: ${problem}`);
      await proc.sleep(rng.range(1, 20), req.signal, cancelled);
      if (rng.chance(o.faults.modelStall)) {
        o.world.note(`${modelId}: stall`);
        await proc.sleep(1_000_000_000, req.signal, cancelled);
      }
      if (rng.chance(o.faults.modelRetryable)) throw new ProviderError('sim: overloaded', { retryable: true, code: 'server' });
      const usage = { inputTokens: 20, outputTokens: rng.range(1, 30) };
      const { rounds, prompt } = since(req);
      const calls = plan(rounds, prompt);
      if (calls.length > 0) {
        const toolCalls = calls.map((c) => ({ id: o.nextCallId(), name: c.name, arguments: JSON.stringify(c.args) }));
        return { message: { role: 'assistant', content: '', toolCalls }, usage, finishReason: 'tool_calls' };
      }
      return { message: { role: 'assistant', content: answer(req, prompt) }, usage, finishReason: 'stop' };
    },
  };
}

/** The root agent's model: rounds of sub-agent calls (and its own ledger entries), then a summary of the answers. */
export function rootModel(o: TreeOutside, proc: Proc): ModelProvider {
  const rng = o.world.rng;
  return treeModel(
    o,
    proc,
    'root-model',
    (rounds) => {
      if (rounds >= o.rootRounds || rng.int(10) >= 8) return [];
      const n = 1 + rng.int(3);
      return Array.from({ length: n }, (_, i) => {
        const k = rng.int(7);
        if (k === 6) return { name: 'ledger', args: { entry: `root-${rounds}.${i}` } };
        return { name: SUB_AGENTS[k < 4 ? 0 : 1], args: { input: `topic ${rounds}.${i}` } };
      });
    },
    (req) =>
      `summary: ${req.messages
        .filter((m) => m.role === 'tool')
        .map((m) => String(m.content).slice(0, 40))
        .join(' | ')}`,
  );
}

/** A sub-agent's model: a round of ledger, stamp and lookup calls (sometimes two), then its answer. */
function childModel(o: TreeOutside, proc: Proc, agent: string): ModelProvider {
  const rng = o.world.rng;
  return treeModel(
    o,
    proc,
    `${agent}-model`,
    (rounds, prompt) => {
      if (rounds >= 2 || (rounds === 1 && rng.int(3) > 0)) return [];
      const menu = ['ledger', 'ledger', 'stamp', 'lookup'];
      return Array.from({ length: 1 + rng.int(2) }, (_, i) => {
        const name = menu[rng.int(menu.length)]!;
        return { name, args: name === 'lookup' ? { q: `${prompt} ${i}` } : { entry: `${prompt} ${rounds}.${i}` } };
      });
    },
    (_req, prompt) => `${agent} noted ${prompt}`,
  );
}

/** The tree's tools bound to one process: the effect lands in the world, the answer reaches only a live process. */
export function treeTools(o: TreeOutside, proc: Proc): AnyTool[] {
  const { world, ledgers, faults: f } = o;
  const rng = world.rng;
  const run = (name: string, mode: 'parallel' | 'exclusive', args: unknown, ctx: ToolContext) => {
    o.watch.toolStarted(proc.id, ctx.sessionId, { callId: ctx.callId, name, mode });
    o.onToolStart(ctx.sessionId, ctx.callId);
    const entry: ToolRun = { key: ctx.idempotencyKey, callId: ctx.callId, name, mode, proc: proc.id, effect: false };
    ledgers.toolRuns.push(entry);
    const b = rng.chance(f.toolFail) ? 'fail' : rng.chance(f.toolLate) ? 'late' : rng.chance(f.toolHang) ? 'hang' : 'ok';
    if (b !== 'ok') world.note(`tool ${name} ${ctx.sessionId} ${ctx.callId}: ${b}`);
    return effectInWorld(world, proc, entry, b, name, args, ctx);
  };
  const reconcileLedger = (_a: unknown, ctx: ToolContext) => reconcileFromLedger(ledgers, proc, ctx);
  return TOOL_DEFS.map((t) => ({
    ...t,
    execute: (a: unknown, ctx: ToolContext) => run(t.name, t.mode, a, ctx),
    ...(t.name === 'ledger' ? { reconcile: reconcileLedger } : {}),
  })) as AnyTool[];
}

const Entry = z.object({ entry: z.string() });
const unbound = (): string => {
  throw new Error('bound per process by treeTools');
};
const TOOL_DEFS: AnyTool[] = [
  defineTool({ name: 'lookup', description: 'read', mode: 'parallel', parameters: z.object({ q: z.string() }), execute: unbound }),
  defineTool({
    name: 'ledger',
    description: 'writes a ledger entry (reconcilable)',
    mode: 'exclusive',
    parameters: Entry,
    execute: unbound,
    reconcile: () => undefined,
  }),
  defineTool({ name: 'stamp', description: 'stamps a document (no reconcile)', mode: 'exclusive', parameters: Entry, execute: unbound }),
];

/** The sub-agents of one process (its models and tools). */
export function subAgents(o: TreeOutside, proc: Proc): Agent[] {
  const tools = treeTools(o, proc);
  return SUB_AGENTS.map((name) =>
    defineAgent({ name, instructions: `sim ${name}: write the entries, then say what you noted`, model: childModel(o, proc, name), tools }),
  );
}
