/**
 * Child program for test/crash/recovery.test.ts: one scripted agent on an LMDB log, in a
 * real process that SIGKILLs itself at an exact point.
 *
 *   node --import tsx test/crash/recovery-child.ts <scenario> <phase> <dir>
 *
 * Kill points: env KILL_AFTER=<event type> kills the process right after the first append that
 * contains an event of that type is durable (before the append's promise returns to the
 * runtime); a scenario's tool may also kill the process from inside its execute (after its
 * effect, written to `<dir>/ledger.tsv`, fsync'd).
 *
 * Protocol lines: `RESULT <json>` (an ExecutionResult, brief), `RECOVERY <json>`, `KILL <what>`,
 * `DONE`, `ERROR <message>`.
 */
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { contentText } from '../../src/contracts/content.js';
import { z } from 'zod';
import { createRuntime } from '../../src/runtime/runtime.js';
import type { ModelRequest } from '../../src/contracts/model.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { scriptedModel, type ScriptedStep } from '../../src/providers/scripted.js';
import { defineTool, type AnyTool } from '../../src/tools/define-tool.js';
import { runChild, say } from './child-util.js';

const [scenario, phase, dir] = process.argv.slice(2) as [string, string, string];
const ledger = join(dir, 'ledger.tsv');
const killAfter = process.env.KILL_AFTER;

function die(what: string): never {
  say(`KILL ${what}`);
  process.kill(process.pid, 'SIGKILL');
  for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
}

function effect(line: string): void {
  const fd = openSync(ledger, 'a');
  try {
    writeSync(fd, `${line}\t${process.pid}\t${phase}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Kills the process right after the first durable append holding an event of type `killAfter`. */
function killingStore(inner: EventStore): EventStore {
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'append') {
        return async (...args: Parameters<EventStore['append']>) => {
          const records = await target.append(...args);
          if (killAfter && records.some((r) => r.type === killAfter)) die(`after ${killAfter}`);
          return records;
        };
      }
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/** A model whose answer depends only on the request: the number of assistant messages so far. */
function modelOf(script: (n: number) => ScriptedStep) {
  const step = (req: ModelRequest): ScriptedStep => script(req.messages.filter((m) => m.role === 'assistant').length);
  return scriptedModel([step], { loop: true });
}

const brief = (r: ExecutionResult) => ({
  status: r.status,
  outcome: r.outcome,
  ...(r.error ? { error: r.error.message } : {}),
  ...(r.finalMessage ? { finalMessage: r.finalMessage } : {}),
});
const none = z.object({});

/** The session's requestCancel, for a tool that asks for the cancel itself. */
let cancel: ((reason: string) => Promise<boolean>) | undefined;

async function main(): Promise<void> {
  const store = killingStore(lmdbStore({ path: join(dir, 'db') }));
  let tools: AnyTool[];
  let model;
  let extra: Record<string, unknown> = {};
  switch (scenario) {
    case 'deny': {
      // two exclusive tools that need approval; the user approves wire and denies note
      tools = [
        defineTool({
          name: 'wire',
          description: 'wires money',
          parameters: none,
          needsApproval: true,
          execute: (_a, ctx) => (effect(`wire ${ctx.idempotencyKey}`), 'wired'),
        }),
        defineTool({
          name: 'note',
          description: 'writes a note',
          parameters: none,
          needsApproval: true,
          execute: (_a, ctx) => (effect(`note ${ctx.idempotencyKey}`), 'noted'),
        }),
      ];
      model = modelOf((n) =>
        n === 0
          ? {
              toolCalls: [
                { id: 'c1', name: 'wire', arguments: {} },
                { id: 'c2', name: 'note', arguments: {} },
              ],
            }
          : 'done',
      );
      break;
    }
    case 'budget': {
      // the model would call `tick` forever; maxToolCalls 2 ends the run
      tools = [
        defineTool({
          name: 'tick',
          description: 'ticks',
          mode: 'parallel',
          parameters: none,
          execute: (_a, ctx) => (effect(`tick ${ctx.idempotencyKey}`), 'ticked'),
        }),
      ];
      model = modelOf((n) => (n < 6 ? { toolCalls: [{ id: `t${n + 1}`, name: 'tick', arguments: {} }] } : 'done'));
      extra = { budget: { maxToolCalls: 2 } };
      break;
    }
    case 'lock': {
      // an exclusive charge of the account, and a (parallel) audit of the same account after it
      tools = [
        defineTool({
          name: 'charge',
          description: 'charges the account',
          parameters: none,
          resources: ['acct'],
          execute: (_a, ctx) => {
            effect(`charge ${ctx.idempotencyKey}`);
            if (phase === 'first') die('inside charge');
            return 'charged';
          },
        }),
        defineTool({
          name: 'audit',
          description: 'audits the account',
          mode: 'parallel',
          parameters: none,
          resources: ['acct'],
          execute: (_a, ctx) => (effect(`audit ${ctx.idempotencyKey}`), 'audited'),
        }),
      ];
      model = modelOf((n) =>
        n === 0
          ? {
              toolCalls: [
                { id: 'c1', name: 'charge', arguments: {} },
                { id: 'c2', name: 'audit', arguments: {} },
              ],
            }
          : 'done',
      );
      break;
    }
    case 'relock': {
      // run r0: a long exchange (older history to compact later); run r: charge (exclusive, acct,
      // no reconcile: the process dies inside it), then `big` (needs approval) whose long result
      // makes the context too large, so the next model call compacts first
      tools = [
        defineTool({
          name: 'charge',
          description: 'charges the account',
          parameters: none,
          resources: ['acct'],
          execute: (_a, ctx) => {
            effect(`charge ${ctx.idempotencyKey}`);
            if (phase === 'first') die('inside charge');
            return 'charged';
          },
        }),
        defineTool({
          name: 'big',
          description: 'reads a long report',
          parameters: none,
          needsApproval: true,
          execute: () => 'r'.repeat(4000),
        }),
      ];
      const step = (req: ModelRequest): ScriptedStep => {
        if (req.messages[0]?.role === 'system' && req.tools.length === 0) return 'an earlier exchange about nothing';
        let i = req.messages.length - 1;
        while (i >= 0 && !(req.messages[i]!.role === 'user' && contentText(req.messages[i]!.content).startsWith('PROMPT '))) i--;
        const prompt = contentText(req.messages[i]?.content ?? '');
        const n = req.messages.slice(i + 1).filter((m) => m.role === 'assistant').length;
        if (prompt.startsWith('PROMPT r0')) return 'ok';
        if (n === 0) return { toolCalls: [{ id: 'c1', name: 'charge', arguments: {} }] };
        if (n === 1) return { toolCalls: [{ id: 'c2', name: 'big', arguments: {} }] };
        return 'done';
      };
      model = scriptedModel([step], { loop: true });
      extra = { config: { contextWindow: 3000, outputReserve: 100 } };
      break;
    }
    case 'cancel': {
      // a read-only look that asks for the cancel as it runs (and ignores its signal), then a payment
      tools = [
        defineTool({
          name: 'look',
          description: 'looks around',
          mode: 'parallel',
          parameters: none,
          execute: (_a, ctx) => {
            effect(`look ${ctx.idempotencyKey}`);
            if (phase !== 'first') return 'seen'; // (never: the continue must not run it again)
            void cancel?.('the user changed their mind');
            return new Promise<string>(() => {});
          },
        }),
        defineTool({
          name: 'pay',
          description: 'pays',
          parameters: none,
          execute: (_a, ctx) => (effect(`pay ${ctx.idempotencyKey}`), 'paid'),
        }),
      ];
      model = modelOf((n) =>
        n === 0
          ? {
              toolCalls: [
                { id: 'c1', name: 'look', arguments: {} },
                { id: 'c2', name: 'pay', arguments: {} },
              ],
            }
          : 'done',
      );
      break;
    }
    default:
      throw new Error(`unknown scenario ${scenario}`);
  }
  const runtime = createRuntime({ store, model, tools, ...extra });
  const session = await runtime.openSession('s');
  cancel = (reason) => session.requestCancel(reason);
  say(`RECOVERY ${JSON.stringify(session.recovery)}`);
  const out = (r: ExecutionResult) => say(`RESULT ${JSON.stringify(brief(r))}`);
  if (scenario === 'relock') {
    if (phase === 'first') {
      out(await session.execute({ kind: 'prompt', runId: 'r0', attemptId: 'a1', message: `PROMPT r0 ${'x'.repeat(8000)}` }));
      out(await session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'PROMPT r: charge, then read the report' }));
    } else {
      const r = await session.execute({ kind: 'continue', runId: 'r', attemptId: `c${process.pid}` });
      out(r);
      say(`LOCKS ${JSON.stringify(session.activeResourceLocks)}`);
      await session.releaseResources(['acct']);
      say(`LOCKS ${JSON.stringify(session.activeResourceLocks)}`);
      out(
        await session.execute({
          kind: 'respond',
          runId: 'r',
          attemptId: `d${process.pid}`,
          questionId: r.pendingRequest!.questionId,
          answer: { decisions: { c2: 'approve' } },
        }),
      );
      say(`LOCKS ${JSON.stringify(session.activeResourceLocks)}`);
    }
  } else if (phase === 'first') {
    const r = await session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: `do the ${scenario} task` });
    out(r);
    if (scenario === 'deny') {
      const pr = r.pendingRequest!;
      out(
        await session.execute({
          kind: 'respond',
          runId: 'r',
          attemptId: 'a2',
          questionId: pr.questionId,
          answer: { decisions: { c1: 'approve' } },
        }),
      );
    }
  } else {
    out(await session.execute({ kind: 'continue', runId: 'r', attemptId: `c${process.pid}` }));
  }
  await runtime.close();
  say('DONE');
}

runChild(main);
