import type { ToolOutcomeInput } from '../contracts/tools.js';
import type { JsonSchemaValidatorLike, McpCallResult, McpToolInfo } from './mcp-client.js';

type Validate = (input: unknown) => { valid: boolean; errorMessage?: string | undefined };

/** Each listed tool's output schema compiled (or why it cannot be), by the listing it came in. */
const compiled = new WeakMap<McpToolInfo, Validate | string>();

type Issue = { path: readonly PropertyKey[]; message: string };
type SchemaLike = { safeParse(v: unknown): { success: true; data: unknown } | { success: false; error: { issues: readonly Issue[] } } };

let shapeLoad: Promise<SchemaLike | undefined> | undefined;

/** The SDK's `CallToolResultSchema` (loaded on first use), or undefined without the SDK. */
export const callResultSchema = (): Promise<SchemaLike | undefined> =>
  (shapeLoad ??= import('@modelcontextprotocol/sdk/types.js').then(
    (m) => (m as { CallToolResultSchema?: SchemaLike }).CallToolResultSchema,
    () => undefined,
  ));

/**
 * What a `tools/call` response means: the server answered, so the call ran, and its result is
 * the outcome — also when it does not fit the MCP schema of a tool result (the SDK's request
 * throws then, which would read as a dropped connection) or does not match the output schema the
 * tool declares (the SDK's `Client.callTool` throws then). What can be read of it is delivered,
 * and what does not fit is named in the content, after the server's own text; `isError` stays the
 * server's: an error flag would tell the model the call failed, and invite it to run again what
 * already ran. `shape`: the SDK's `CallToolResultSchema`.
 * @example
 * readResult(info, await client.request({ method: 'tools/call', params }, z.unknown()), validator, await callResultSchema())
 */
export function readResult(
  info: McpToolInfo | undefined,
  raw: unknown,
  validator: JsonSchemaValidatorLike,
  shape: SchemaLike | undefined,
): ToolOutcomeInput {
  const checked = shape?.safeParse(raw);
  const r = (checked?.success ? checked.data : typeof raw === 'object' && raw !== null ? raw : {}) as McpCallResult;
  const unfit: string[] = [];
  if (checked?.success === false) unfit.push(`its result does not fit the MCP schema of a tool result: ${issuesOf(checked.error.issues)}`);
  const mismatch = info === undefined ? undefined : outputMismatch(info, r, validator);
  if (mismatch !== undefined) unfit.push(mismatch);
  // an older server's `{ toolResult }` (the schema's parse gives it an empty `content`): its value is the text
  const legacy = typeof raw === 'object' && raw !== null && (raw as McpCallResult).content === undefined && 'toolResult' in raw;
  const outcome = outcomeOf(legacy ? { ...r, content: undefined } : r);
  if (unfit.length === 0 || outcome.kind !== 'completed') return outcome;
  const text = typeof outcome.content === 'string' ? outcome.content : '';
  return { ...outcome, content: `${text}${text === '' ? '' : '\n'}(the call ran, but ${unfit.join('; and ')})` };
}

const issuesOf = (issues: readonly Issue[]): string =>
  issues.map((i) => `${i.path.length > 0 ? i.path.map(String).join('.') : 'the result'}: ${i.message}`).join('; ');

/**
 * Why `r` does not fit the output schema `info` declares, or undefined (it fits, or there is no
 * schema). As the SDK's client checks: structured content, when there is some, must match the
 * schema; a result without it must be an error result.
 */
export function outputMismatch(info: McpToolInfo, r: McpCallResult, validator: JsonSchemaValidatorLike): string | undefined {
  const schema = info.outputSchema;
  if (schema === undefined) return undefined;
  if (r.structuredContent === undefined) {
    return r.isError === true ? undefined : `its result has no structured content, though ${info.name} declares an output schema`;
  }
  let check = compiled.get(info);
  if (check === undefined) {
    try {
      check = validator.getValidator(schema as never);
    } catch (e) {
      check = (e as Error)?.message ?? String(e);
    }
    compiled.set(info, check);
  }
  if (typeof check === 'string')
    return `the output schema ${info.name} declares cannot be compiled (${check}), so its result was not checked`;
  let verdict: ReturnType<Validate>;
  try {
    verdict = check(r.structuredContent);
  } catch (e) {
    // a validator that throws does not make the response any less the call's result
    return `its result could not be checked against the output schema ${info.name} declares (${(e as Error)?.message ?? String(e)})`;
  }
  if (verdict.valid) return undefined;
  return `its result does not match the output schema ${info.name} declares: ${verdict.errorMessage ?? 'no reason given'}`;
}

/** Text content joined; other blocks named; the structured result kept; `isError` kept. */
export function outcomeOf(r: McpCallResult): ToolOutcomeInput {
  const parts: string[] = [];
  // a response outside the MCP schema may hold anything here: read what is there, throw on nothing
  for (const block of Array.isArray(r.content) ? (r.content as unknown[]) : []) {
    const b = (typeof block === 'object' && block !== null ? block : {}) as {
      type?: string;
      text?: string;
      mimeType?: string;
      uri?: string;
      name?: string;
      resource?: { uri?: string; text?: string; mimeType?: string };
    };
    if (b.type === 'text' && typeof b.text === 'string') parts.push(b.text);
    else if (b.type === 'image' || b.type === 'audio') parts.push(`[${b.type} ${b.mimeType ?? ''}]`.replace(' ]', ']'));
    else if (b.type === 'resource_link') parts.push(`[resource ${b.uri ?? ''}${b.name ? ` (${b.name})` : ''}]`);
    else if (b.type === 'resource')
      parts.push(typeof b.resource?.text === 'string' ? b.resource.text : `[resource ${b.resource?.uri ?? ''}]`);
    else parts.push(`[${typeof b.type === 'string' ? b.type : 'untyped'} block]`); // outside the MCP schema: named, not read
  }
  if (r.toolResult !== undefined && r.content === undefined)
    parts.push(typeof r.toolResult === 'string' ? r.toolResult : JSON.stringify(r.toolResult));
  const structured = r.structuredContent !== undefined ? { structured: JSON.parse(JSON.stringify(r.structuredContent)) as never } : {};
  const content = parts.length > 0 ? parts.join('\n') : r.structuredContent !== undefined ? JSON.stringify(r.structuredContent) : '';
  return { kind: 'completed', content, isError: r.isError === true, ...structured };
}
