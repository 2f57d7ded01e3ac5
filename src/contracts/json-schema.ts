import { z } from 'zod';
import { JsonValue } from './json.js';

/**
 * A zod schema for a JSON Schema read from the log (a question's, or a run's recorded output
 * schema), converted with `z.fromJSONSchema`; any JSON where that schema cannot be compiled
 * (askUser refuses such schemas when asked; a log written before may hold one).
 * @example
 * answerSchema({ type: 'object', properties: { n: { type: 'number' } }, required: ['n'] }).parse({ n: 1 })
 */
export function answerSchema(schema: unknown): z.ZodType {
  return compiledJsonSchema(schema) ?? JsonValue;
}

/** `schema` converted to zod (with its `required` keys checked), or undefined where zod cannot compile it. */
export function compiledJsonSchema(schema: unknown): z.ZodType | undefined {
  let compiled: z.ZodType;
  try {
    compiled = z.fromJSONSchema(schema as never);
  } catch {
    return undefined;
  }
  // zod's conversion drops `required` keys that `properties` does not list: checked here too
  return compiled.superRefine((value, ctx) => {
    for (const path of missingRequired(schema, value, [])) ctx.addIssue({ code: 'custom', path, message: 'required by the schema' });
  });
}

/** Paths of keys a JSON Schema's `required` lists (at any depth of `properties` / `items`) that `value` lacks. */
function missingRequired(schema: unknown, value: unknown, at: (string | number)[]): (string | number)[][] {
  if (typeof schema !== 'object' || schema === null || typeof value !== 'object' || value === null) return [];
  const s = schema as { required?: unknown; properties?: Record<string, unknown>; items?: unknown };
  const out: (string | number)[][] = [];
  if (Array.isArray(value)) {
    value.forEach((v, i) => out.push(...missingRequired(s.items, v, [...at, i])));
    return out;
  }
  const obj = value as Record<string, unknown>;
  if (Array.isArray(s.required)) for (const k of s.required) if (typeof k === 'string' && !Object.hasOwn(obj, k)) out.push([...at, k]);
  for (const [k, sub] of Object.entries(s.properties ?? {}))
    if (Object.hasOwn(obj, k)) out.push(...missingRequired(sub, obj[k], [...at, k]));
  return out;
}
