import type { ToolCallIntent } from '../contracts/calls.js';
import type { AnyTool } from './define-tool.js';

/**
 * A call rebuilt from the log gets what its tool's `execute` got on the direct path: the schema's
 * parsed output (defaults, transforms), parsed again from the model's text — not the JSON copy.
 * `mismatch`: the text no longer fits the tool's schema (the tool changed since the call was
 * logged, or is gone): such a call must not run with it. A log from before `rawArguments` has only
 * the JSON copy: it is parsed, and a copy the schema refuses is a mismatch too.
 */
export function withParsedArguments(tools: ReadonlyMap<string, AnyTool>, c: ToolCallIntent): { call: ToolCallIntent; mismatch?: string } {
  const tool = tools.get(c.name);
  if (!tool) return { call: c, mismatch: `the ${c.name} tool is no longer registered` };
  if (typeof c.rawArguments !== 'string') {
    const legacy = tool.parameters.safeParse(c.arguments);
    if (legacy.success) return { call: { ...c, arguments: legacy.data } };
    return {
      call: c,
      mismatch: `its logged arguments no longer match the ${c.name} tool's schema (${legacy.error.issues[0]?.message ?? 'invalid'})`,
    };
  }
  let json: unknown;
  try {
    json = c.rawArguments.trim() === '' ? {} : JSON.parse(c.rawArguments);
  } catch {
    return { call: c, mismatch: 'its arguments are not JSON' };
  }
  const parsed = tool.parameters.safeParse(json);
  if (parsed.success) return { call: { ...c, arguments: parsed.data } };
  return {
    call: c,
    mismatch: `its arguments no longer match the ${c.name} tool's schema (${parsed.error.issues[0]?.message ?? 'invalid'})`,
  };
}
