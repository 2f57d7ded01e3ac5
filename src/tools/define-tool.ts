import { ValidationError } from '../contracts/errors.js';
import { z } from 'zod';
import type { ToolMode } from '../contracts/tools.js';
import { parseInput } from '../contracts/validate.js';
import { timerMs } from '../contracts/config.js';
import { isId, IdInput } from '../contracts/ids.js';
import { agentMarkOf, markTool, type AgentMark } from './agent-marks.js';
import type { AnyTool, ToolDefinition } from './tool-definition.js';

export type { AnyTool, ToolContext, ToolDefinition, ToolList, ToolReturn } from './tool-definition.js';

/** Unknown keys are refused: a misspelt option (needApproval) must not quietly become its default. */
const ToolOptions = z.strictObject({
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'letters, digits, _ and -, at most 64'),
  description: z.string(),
  parameters: z.custom<z.ZodType>((v) => v instanceof z.ZodType, 'a zod schema'),
  mode: z.enum(['parallel', 'exclusive']).default('exclusive'),
  resources: z.union([z.array(IdInput), z.custom<(a: unknown) => string[]>((v) => typeof v === 'function')]).default([]),
  timeoutMs: timerMs.positive().optional(),
  needsApproval: z.union([z.boolean(), z.custom<(a: unknown) => boolean>((v) => typeof v === 'function')]).optional(),
  execute: z.custom<ToolDefinition['execute']>((v) => typeof v === 'function', 'a function'),
  reconcile: z.custom<NonNullable<ToolDefinition['reconcile']>>((v) => typeof v === 'function').optional(),
  // A defined tool spread into defineTool (`{ ...tool, timeoutMs }`) brings its spec (recomputed),
  // an agentTool its `resumable` (kept with its mark), an MCP tool its `list` and `revision`
  // (refused: see respreadIssue). Written by hand, they are refused too.
  spec: z.unknown().optional(),
  resumable: z.literal(true).optional(),
  list: z.unknown().optional(),
  revision: z.unknown().optional(),
});

/**
 * What defineTool takes: a tool's fields, without those only the runtime's own tool makers set
 * (`resumable`: agentTool; `list`, `revision`: mcpTools) — a tool of theirs spread in brings them.
 */
export type ToolOptions<A> = Omit<ToolDefinition<A>, 'spec' | 'mode' | 'resources' | 'resumable' | 'list' | 'revision'> & {
  mode?: ToolMode;
  resources?: string[] | ((args: A) => string[]);
};

/**
 * Defines a tool. `mode` defaults to `exclusive` (runs alone, in order); declare `parallel` only
 * for side-effect-free tools. `resources` name what the call locks.
 *
 * A defined tool spread in with other options (`defineTool({ ...tool, timeoutMs })`) is defined
 * again: its spec recomputed. An agentTool stays one (its calls run its agent, resumed after a
 * crash), with the new options; its `execute` and `reconcile` are not yours to give. A tool of
 * `mcpTools` is refused (ValidationError): the copy would leave the server's live list; give
 * `mcpTools` the options instead.
 * @example
 * const add = defineTool({
 *   name: 'add', description: 'Adds two numbers', mode: 'parallel',
 *   parameters: z.object({ a: z.number(), b: z.number() }),
 *   execute: ({ a, b }) => String(a + b),
 * })
 * const researcher = defineTool({ ...agentTool(researcherAgent), timeoutMs: 120_000, needsApproval: true })
 */
export function defineTool<A>(options: ToolOptions<A>): ToolDefinition<A> {
  const o = parseInput(ToolOptions, options, 'defineTool') as unknown as ToolDefinition<A>;
  const mark = agentMarkOf(options);
  const respread = respreadIssue(o, mark);
  if (respread) throw new ValidationError(`defineTool: ${o.name}`, [respread]);
  // What the model is shown must be what validation accepts, in the shape both providers take:
  // a JSON Schema of an object. A type JSON Schema cannot express (z.date(), z.bigint(), z.map())
  // would be advertised as {} and then refused on every call.
  let schema: Record<string, unknown>;
  try {
    schema = z.toJSONSchema(options.parameters as z.ZodType, { io: 'input', unrepresentable: 'throw' }) as Record<string, unknown>;
  } catch (e) {
    throw new ValidationError(`defineTool: ${o.name}`, [
      {
        path: ['parameters'],
        message: `${(e as Error).message}; use types JSON Schema can express: strings, numbers, booleans, arrays, objects`,
      },
    ]);
  }
  if (schema.type !== 'object') {
    throw new ValidationError(`defineTool: ${o.name}`, [
      { path: ['parameters'], message: 'must be an object schema (z.object(...)): providers take tool arguments as a JSON object' },
    ]);
  }
  delete schema.$schema;
  const tool: ToolDefinition<A> = {
    ...o,
    execute: options.execute,
    reconcile: options.reconcile,
    spec: { name: o.name, description: o.description, parameters: schema },
    ...(mark?.kind === 'agent' ? { resumable: true } : {}),
  };
  return mark ? markTool(tool, mark) : tool;
}

/**
 * Why the keys a tool of the runtime's own makers brings cannot be taken here, if they cannot:
 * - a `list` or `revision` (an MCP tool's): a copy keeping the list would have its options
 *   ignored (the runtime offers the list's tools in its place), one without it would no longer
 *   follow the server, and both would show the model a bare object, not the server's JSON Schema;
 * - a `resumable` without an agentTool's mark;
 * - an agentTool's `execute` replaced, or a `reconcile` added (its calls run its agent).
 */
function respreadIssue(o: AnyTool, mark: AgentMark | undefined): { path: string[]; message: string } | undefined {
  if (o.list !== undefined)
    return {
      path: ['list'],
      message:
        `a tool of mcpTools is not defined again: the runtime follows its server's live list, not a copy (whose parameters ` +
        `would lose the server's JSON Schema); give these options to ` +
        `mcpTools(client, { needsApproval, parallel, resources, timeoutMs, include, prefix, reconcile })`,
    };
  if (o.revision !== undefined)
    return { path: ['revision'], message: 'not an option: a tool whose provider can change it (mcpTools) gets its revision from there' };
  if (mark?.kind !== 'agent') {
    if (o.resumable === undefined) return undefined;
    return { path: ['resumable'], message: "not an option: only an agentTool's calls resume (spread an agentTool in to keep one)" };
  }
  const runs = `${o.name} runs the ${mark.agent.name} agent (an agentTool)`;
  if (o.execute !== mark.standIn)
    return { path: ['execute'], message: `${runs}: its calls run the agent in a child session; define a tool of your own instead` };
  if (o.reconcile !== undefined)
    return { path: ['reconcile'], message: `${runs}: a call cut short by a crash resumes its child session, and is never reconciled` };
  return undefined;
}

/**
 * The resource keys a call of `tool` locks. Contract: a tool's own `resources(args)` may throw;
 * one that returns anything but an array of keys (the id rule, IdInput: non-empty strings, no NUL,
 * no lone surrogate) throws here, naming the tool (a step fails on it as on a throw, with the
 * assistant message logged, never with a bad `tool/call` record).
 */
export function resourcesOf(tool: AnyTool, args: unknown): string[] {
  if (typeof tool.resources !== 'function') return tool.resources;
  const keys: unknown = tool.resources(args);
  if (!Array.isArray(keys) || !keys.every((k) => isId(k))) {
    throw new TypeError(`the resources function of tool ${tool.name} returned ${kindOf(keys)}, not an array of resource keys`);
  }
  return keys as string[];
}

const kindOf = (v: unknown): string => {
  if (!Array.isArray(v)) return v === null ? 'null' : typeof v;
  const bad: unknown = v.find((k) => !isId(k));
  return typeof bad === 'string'
    ? `an array with the key ${JSON.stringify(bad)} (an empty string, or one with a NUL or a lone surrogate)`
    : 'an array with a non-string key';
};
