/**
 * A tool that needs a person's approval: the run suspends (durably) with a pending request, and a
 * `respond` attempt answers it — from this process or from a fresh one after a restart.
 *
 *   npx tsx examples/approval.ts [dataDir] [approve|deny]
 */
import { z } from 'zod';
import { contentText, createRuntime, defineTool, lmdbStore, scriptedModel } from 'actorloop';

const [dataDir = './.actorloop', decision = 'approve'] = process.argv.slice(2);
if (decision !== 'approve' && decision !== 'deny') throw new Error('the decision is approve or deny');

const transfer = defineTool({
  name: 'transfer',
  description: 'Transfers money to an account',
  parameters: z.object({ to: z.string(), amount: z.number().positive() }),
  needsApproval: true, // every call waits for a decision
  resources: ['ledger'],
  execute: ({ to, amount }, ctx) => `transferred ${amount} to ${to} (idempotency key ${ctx.idempotencyKey})`,
});

const model = scriptedModel([
  { toolCalls: [{ id: 't1', name: 'transfer', arguments: { to: 'ACME', amount: 250 } }] },
  (req) =>
    contentText(req.messages.at(-1)?.content ?? '').startsWith('transferred')
      ? 'Paid ACME 250.'
      : 'The transfer was not approved; nothing was paid.',
]);
const runtime = createRuntime({ store: lmdbStore({ path: dataDir }), model, tools: [transfer] });
const session = await runtime.openSession(`approval-${Date.now()}`);

const first = await session.execute({ kind: 'prompt', runId: 'pay', attemptId: 'a1', message: 'Pay ACME 250' });
console.log('first attempt:', first.outcome, first.status);
const pending = first.pendingRequest;
if (pending?.kind !== 'approval') throw new Error('expected an approval request');
for (const c of pending.calls) console.log(`  needs approval: ${c.name}(${JSON.stringify(c.arguments)}) [${c.callId}]`);

// The answer: one decision per call (a call left out is denied).
const decisions = Object.fromEntries(pending.calls.map((c) => [c.callId, decision]));
const second = await session.execute({
  kind: 'respond',
  runId: 'pay',
  attemptId: 'a2',
  questionId: pending.questionId,
  answer: { decisions },
});
console.log('after respond:', second.outcome, second.status, '-', second.finalMessage);
await runtime.close();
