import type { FinishReason, ToolCall } from '../contracts/message.js';
import type { AnyTool } from './define-tool.js';

export interface ValidCall {
  callId: string;
  name: string;
  arguments: unknown;
  tool: AnyTool;
}

export interface CallIssue {
  callId: string;
  name: string;
  message: string;
}

/**
 * The calls of one assistant message with distinct ids: a call whose id an earlier call of the
 * message has (some compatible servers give parallel calls one id) gets the id with `_2`, `_3`, …
 * (a suffix no other call has; letters, digits, `_` and `-` stay valid for every provider). Each
 * call then has its own record, result and approval, and the next request names every call once
 * (providers refuse a message whose tool calls share an id).
 * @example
 * distinctCallIds([{ id: 'c', ... }, { id: 'c', ... }]) // ids 'c', 'c_2'
 */
export function distinctCallIds(calls: readonly ToolCall[]): ToolCall[] {
  const taken = new Set(calls.map((c) => c.id));
  const seen = new Set<string>();
  return calls.map((c) => {
    if (!seen.has(c.id)) {
      seen.add(c.id);
      return c;
    }
    let n = 2;
    while (taken.has(`${c.id}_${n}`)) n++;
    const id = `${c.id}_${n}`;
    taken.add(id);
    return { ...c, id };
  });
}

/**
 * Checks the tool calls of one assistant message (DESIGN §4 item 3): unknown tool, invalid JSON,
 * schema failure, calls cut by `finish_reason=length`, a repeated id (a message logged before
 * `distinctCallIds` existed). One issue per bad call; any issue rejects the whole batch (no call of it runs).
 */
export function validateToolCalls(
  calls: readonly ToolCall[],
  tools: ReadonlyMap<string, AnyTool>,
  finishReason: FinishReason,
): { calls: ValidCall[]; issues: CallIssue[] } {
  const valid: ValidCall[] = [];
  const issues: CallIssue[] = [];
  const ids = new Set<string>();
  for (const c of calls) {
    if (ids.has(c.id)) {
      issues.push({ callId: c.id, name: c.name, message: `duplicate tool call id ${c.id}` });
      continue;
    }
    ids.add(c.id);
    if (finishReason === 'length') {
      issues.push({
        callId: c.id,
        name: c.name,
        message: 'the response was cut off (output token limit) before this tool call was complete; call it again',
      });
      continue;
    }
    const tool = tools.get(c.name);
    if (!tool) {
      issues.push({
        callId: c.id,
        name: c.name,
        message: `unknown tool "${c.name}"; available: ${[...tools.keys()].join(', ') || 'none'}`,
      });
      continue;
    }
    let args: unknown;
    try {
      args = c.arguments.trim() === '' ? {} : JSON.parse(c.arguments);
    } catch (e) {
      issues.push({ callId: c.id, name: c.name, message: `arguments are not valid JSON: ${(e as Error).message}` });
      continue;
    }
    const parsed = tool.parameters.safeParse(args);
    if (!parsed.success) {
      const detail = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      issues.push({ callId: c.id, name: c.name, message: `arguments do not match the schema: ${detail}` });
      continue;
    }
    valid.push({ callId: c.id, name: c.name, arguments: parsed.data, tool });
  }
  if (issues.length === 0) return { calls: valid, issues };
  // One error per call: the calls that were fine are not run either, and say why (every tool call
  // of the assistant message needs its answer, or the providers refuse the next request).
  for (const v of valid)
    issues.push({
      callId: v.callId,
      name: v.name,
      message: 'not run: another tool call of this message was rejected; call it again if still needed',
    });
  const order = new Map(calls.map((c, i) => [c.id, i]));
  issues.sort((a, b) => (order.get(a.callId) ?? 0) - (order.get(b.callId) ?? 0));
  return { calls: [], issues };
}
