import type { ToolCallOutput } from '../contracts/calls.js';
import type { StepPosition } from '../contracts/calls.js';
import type { EventRecord } from '../contracts/events.js';
import type { Usage } from '../contracts/message.js';
import type { SessionServices } from './session-services.js';

export interface CommitResultsInput {
  at: StepPosition;
  results: ToolCallOutput[];
  usage?: Usage;
}

export interface CommitResultsOutput {
  /** Content of a `concludesTurn` result: the run's final answer. */
  concluded?: string;
  rejections: number;
}

/** The seq of the first record of `type` among `records` (an envelope's logSeq). */
export const seqOf = (records: readonly EventRecord[], type: EventRecord['type']): number | undefined => records.find((r) => r.type === type)?.seq;

/** A `tool_end` envelope (with its logSeq) for each committed `tool/result` among `records`. */
export function emitToolEnds(env: SessionServices, records: readonly EventRecord[]): void {
  for (const rec of records) {
    if (rec.type !== 'tool/result') continue;
    const p = rec.payload as { callId: string; name: string; outcome: ToolCallOutput['outcome']; startedAt?: number; endedAt?: number };
    env.emit(
      {
        type: 'tool_end',
        callId: p.callId,
        name: p.name,
        outcome: p.outcome,
        ...(p.startedAt !== undefined ? { startedAt: p.startedAt } : {}),
        ...(p.endedAt !== undefined ? { endedAt: p.endedAt } : {}),
      },
      rec.seq,
    );
  }
}

async function verdict(env: SessionServices, r: ToolCallOutput): Promise<string | undefined> {
  if (!env.verifier) return undefined;
  try {
    return await env.verifier(r.name, r.outcome);
  } catch (e) {
    return `verifier failed: ${(e as Error)?.message ?? e}`;
  }
}

/**
 * The step's second commit point: every tool result (with verifier rejections, additional
 * messages and released locks) and `step/end`, in one append.
 */
export const commitResultsOp =
  (env: SessionServices) =>
  async (input: CommitResultsInput): Promise<CommitResultsOutput> => {
    const { at, results } = input;
    let concluded: string | undefined;
    let rejections = 0;
    const verdicts = env.verifier ? await Promise.all(results.map((r) => verdict(env, r))) : [];
    // Every tool result first (providers need them right after the assistant message), then the
    // verifier feedback and additional messages.
    for (const r of results) {
      const o = r.outcome;
      env.writer.stage('tool/result', at, {
        callId: r.callId,
        name: r.name,
        outcome: o,
        ...(o.kind === 'skipped' ? {} : { startedAt: r.startedAt, endedAt: r.endedAt }),
      });
    }
    results.forEach((r, i) => {
      const o = r.outcome;
      const rejection = verdicts[i];
      if (rejection !== undefined) {
        rejections++;
        env.writer.stage('verification/rejected', at, {
          target: 'tool',
          callId: r.callId,
          reason: rejection,
          message: { role: 'user', content: `The result of tool call ${r.callId} (${r.name}) was rejected by verification: ${rejection}` },
        });
        return;
      }
      if (o.kind === 'completed') {
        for (const m of o.additionalMessages ?? []) env.writer.stage('user/message', at, { message: m });
        if (o.concludesTurn && concluded === undefined) concluded = o.content;
      }
    });
    env.writer.stage('step/end', at, input.usage ? { usage: input.usage } : {});
    // the tools have run: if this commit fails, the run's end commits their results with run/end
    const records = await env.writer.commit({ keepOnFailure: true });
    emitToolEnds(env, records);
    env.emit({ type: 'step_end', step: at.step, ...(input.usage ? { usage: input.usage } : {}) }, seqOf(records, 'step/end'));
    await env.backpressure();
    return { ...(concluded !== undefined && rejections === 0 ? { concluded } : {}), rejections };
  };
