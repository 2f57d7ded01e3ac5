import type { ToolCallIntent } from '../contracts/calls.js';
import type { PendingRequest } from '../contracts/events.js';
import type { FinishReason, ToolCall } from '../contracts/message.js';
import { ASK_USER_TOOL, askUserTool, matchesApprovalFor } from './ask-user.js';
import { resourcesOf, type AnyTool } from './define-tool.js';
import { lockedAmong } from '../contracts/locks.js';
import { validateToolCalls, type CallIssue } from './validate-calls.js';

export interface PlanInput {
  sessionId: string;
  runId: string;
  step: number;
  toolCalls: readonly ToolCall[];
  finishReason: FinishReason;
  tools: ReadonlyMap<string, AnyTool>;
  /** Resource keys held by uncertain calls. */
  heldLocks: ReadonlySet<string>;
  /** Glob patterns (`name` or `tool:<name>`) of calls that need approval. */
  approvalFor: readonly string[];
  /** When an approval asked for now expires (ms since the epoch). */
  approvalExpiresAt: number;
}

/**
 * What becomes of one assistant message's tool calls (DESIGN §4 items 3–5), decided before any of
 * them is committed or run:
 * - `rejected`: a call is invalid (unknown tool, bad JSON, schema, cut by length) or askUser is not
 *   alone — one issue per call, fed back to the model;
 * - `blocked`: a call needs a resource an uncertain call keeps locked — nothing runs;
 * - `suspend`: askUser, or calls needing approval — the run waits for an answer;
 * - `run`: the batch to run.
 * Contract: calls the tools' own `resources` and `needsApproval` functions, which may throw.
 */
export type ToolCallPlan =
  | { kind: 'rejected'; issues: CallIssue[] }
  | { kind: 'blocked'; locks: string[]; calls: ToolCallIntent[] }
  | { kind: 'suspend'; pendingRequest: PendingRequest; calls: ToolCallIntent[] }
  | { kind: 'run'; calls: ToolCallIntent[] };

export function planToolCalls(input: PlanInput): ToolCallPlan {
  const { toolCalls, tools } = input;
  const { calls: valid, issues } = validateToolCalls(toolCalls, tools, input.finishReason);
  if (issues.length > 0) return { kind: 'rejected', issues };
  const rawById = new Map(toolCalls.map((m) => [m.id, m.arguments] as const));
  const calls: ToolCallIntent[] = valid.map((c) => ({
    callId: c.callId,
    name: c.name,
    arguments: c.arguments,
    mode: c.tool.mode,
    resources: resourcesOf(c.tool, c.arguments),
    // the step too: a provider may number call ids per message (call_0 in every step)
    idempotencyKey: `${input.sessionId}/${input.runId}/${input.step}/${c.callId}`,
    rawArguments: rawById.get(c.callId) ?? '',
    ...(c.tool.resumable ? { resumable: true } : {}),
  }));
  const held = lockedAmong(
    calls.flatMap((d) => d.resources),
    input.heldLocks,
  );
  if (held.length > 0) return { kind: 'blocked', locks: held, calls };
  // the built-in askUser (enabled by the option), not an app tool that happens to share the name
  const asks = calls.filter((d) => d.name === ASK_USER_TOOL && tools.get(d.name) === askUserTool);
  if (asks.length > 0 && calls.length > 1) {
    return {
      kind: 'rejected',
      issues: calls.map((d) => ({
        callId: d.callId,
        name: d.name,
        message: `${ASK_USER_TOOL} must be the only tool call of its message; ask first, then call the other tools`,
      })),
    };
  }
  const ask = asks[0];
  if (ask) {
    const args = ask.arguments as { question: string; schema?: Record<string, unknown> };
    return {
      kind: 'suspend',
      calls,
      pendingRequest: {
        kind: 'question',
        questionId: `question-${ask.callId}`,
        callId: ask.callId,
        question: args.question,
        ...(args.schema ? { schema: args.schema } : {}),
      },
    };
  }
  const needing = valid.filter((c) => needsApproval(c.tool, c.name, c.arguments, input.approvalFor));
  if (needing.length > 0) {
    return {
      kind: 'suspend',
      calls,
      pendingRequest: {
        kind: 'approval',
        questionId: `approval-${needing[0]!.callId}`,
        calls: needing.map((c) => ({ callId: c.callId, name: c.name, arguments: c.arguments })),
        expiresAt: input.approvalExpiresAt,
      },
    };
  }
  return { kind: 'run', calls };
}

/** The approval policy: the tool's own `needsApproval` (a flag or a function of the arguments) or an `approvalFor` glob. */
export function needsApproval(tool: Pick<AnyTool, 'needsApproval'>, name: string, args: unknown, approvalFor: readonly string[]): boolean {
  const own = typeof tool.needsApproval === 'function' ? tool.needsApproval(args as never) : tool.needsApproval === true;
  return own || matchesApprovalFor(approvalFor, name);
}
