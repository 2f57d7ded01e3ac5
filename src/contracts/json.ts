import { z } from 'zod';
import { ValidationError } from './errors.js';

/** A value JSON can hold and give back unchanged. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** Where a value stops being JSON, and why. */
export interface JsonIssue {
  path: (string | number)[];
  message: string;
}

/** Deeper than this is refused (a walk, a stringify or a parse of it would exhaust the stack). */
export const MAX_JSON_DEPTH = 512;

const describe = (v: unknown): string => {
  if (typeof v === 'bigint') return 'a BigInt';
  if (typeof v === 'function') return 'a function';
  if (typeof v === 'symbol') return 'a symbol';
  if (typeof v === 'undefined') return 'undefined';
  if (typeof v === 'number') return String(v);
  const proto = Object.getPrototypeOf(v) as { constructor?: { name?: unknown } } | null;
  const name = proto?.constructor?.name;
  return `a ${typeof name === 'string' && name ? name : 'non-plain object'}`;
};

const errorText = (e: unknown): string => {
  try {
    return e instanceof Error ? e.message : String(e);
  } catch {
    return 'an unprintable value';
  }
};

/**
 * The first place where `value` is not JSON that reads back the same: a cycle, a BigInt, a
 * function, a symbol (as a value or a key), NaN or ±Infinity, `undefined` or a hole in an array,
 * an object that is not plain (Date, Map, class instance), a getter that throws, nesting deeper
 * than MAX_JSON_DEPTH. An object property whose value is `undefined` counts as absent (as in
 * JSON.stringify and zod's optional fields). Keys such as `__proto__` are kept as own keys.
 * @example
 * jsonIssue({ a: [1, 2n] }) // { path: ['a', 1], message: 'a BigInt is not JSON' }
 */
export function jsonIssue(value: unknown): JsonIssue | undefined {
  const ancestors = new Set<object>();
  const path: (string | number)[] = [];
  const at = (message: string): JsonIssue => ({ path: [...path], message });
  const walk = (v: unknown, inObject: boolean): JsonIssue | undefined => {
    switch (typeof v) {
      case 'string':
      case 'boolean':
        return undefined;
      case 'number':
        return Number.isFinite(v) ? undefined : at(`${v} is not JSON (only finite numbers are)`);
      case 'undefined':
        return inObject ? undefined : at('undefined is not JSON');
      case 'object':
        break;
      default:
        return at(`${describe(v)} is not JSON`);
    }
    if (v === null) return undefined;
    if (ancestors.has(v)) return at('a cycle: this value contains itself, and JSON cannot hold it');
    if (ancestors.size >= MAX_JSON_DEPTH) return at(`nested deeper than ${MAX_JSON_DEPTH} levels`);
    let issue: JsonIssue | undefined;
    ancestors.add(v);
    try {
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length && !issue; i++) {
          path.push(i);
          issue = !(i in v) ? at('a hole in an array is not JSON') : walk(v[i], false);
          path.pop();
        }
      } else {
        const proto: unknown = Object.getPrototypeOf(v);
        if (proto !== Object.prototype && proto !== null) return at(`${describe(v)} is not a JSON object`);
        if (Object.getOwnPropertySymbols(v).length > 0) return at('a symbol key is not JSON');
        for (const k of Object.keys(v)) {
          path.push(k);
          let inner: unknown;
          try {
            inner = (v as Record<string, unknown>)[k];
          } catch (e) {
            issue = at(`reading it threw: ${errorText(e)}`);
          }
          issue ??= walk(inner, true);
          path.pop();
          if (issue) break;
        }
      }
    } catch (e) {
      // a proxy whose traps throw
      issue = at(`reading it threw: ${errorText(e)}`);
    } finally {
      ancestors.delete(v);
    }
    return issue;
  };
  return walk(value, false);
}

const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);

function jsonSchema<T>(objectOnly: boolean): z.ZodType<T> {
  return z.unknown().superRefine((v, ctx) => {
    const issue = objectOnly && !isObject(v) ? { path: [], message: 'expected a JSON object' } : jsonIssue(v);
    if (issue) ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message, input: v });
  }) as unknown as z.ZodType<T>;
}

/**
 * Any JSON value, checked by jsonIssue. Parsing returns the input itself (no copy, and keys such
 * as `__proto__` are kept, which z.json() and z.record() drop).
 * @example
 * parseInput(JsonValue, answer, 'session.execute: answer')
 */
export const JsonValue: z.ZodType<JsonValue> = jsonSchema<JsonValue>(false);

/**
 * A JSON object (for provider data, results): as JsonValue, and an object at the top.
 * @example
 * const ProviderData = JsonObject
 */
export const JsonObject: z.ZodType<Record<string, unknown>> = jsonSchema<Record<string, unknown>>(true);

/**
 * A JSON object whose every value passes `value`, keyed by outside data (call ids): unlike
 * z.record() it keeps a `__proto__` key. Parsing returns a copy with no prototype.
 * @example
 * const Decisions = recordOf(z.enum(['approve', 'deny']))
 */
export function recordOf<V extends z.ZodType>(value: V): z.ZodType<Record<string, z.output<V>>> {
  return z.unknown().transform((v, ctx) => {
    if (!isObject(v) || jsonIssue(v)) {
      ctx.addIssue({ code: 'custom', message: 'expected a JSON object', input: v });
      return z.NEVER;
    }
    const out = Object.create(null) as Record<string, z.output<V>>;
    for (const k of Object.keys(v as object)) {
      const r = value.safeParse((v as Record<string, unknown>)[k]);
      if (!r.success) {
        for (const i of r.error.issues)
          ctx.addIssue({ code: 'custom', path: [k, ...(i.path as (string | number)[])], message: i.message, input: v });
        return z.NEVER;
      }
      out[k] = r.data as z.output<V>;
    }
    return out;
  }) as unknown as z.ZodType<Record<string, z.output<V>>>;
}

/**
 * Throws a ValidationError naming `where` and the path unless `value` is JSON (jsonIssue).
 * @example
 * assertJson(payload, 'canonicalJson')
 */
export function assertJson(value: unknown, where: string): asserts value is JsonValue {
  const issue = jsonIssue(value);
  if (issue) throw new ValidationError(where, [issue]);
}
