import { z } from 'zod';
import { ValidationError } from '../contracts/errors.js';
import { JsonValue } from '../contracts/json.js';
import type { Message } from '../contracts/message.js';
import type { ModelRequestOutput } from '../contracts/model.js';
import { canonicalJson } from '../persistence/codec.js';
import { sha256 } from '../persistence/surface.js';
import { compiledJsonSchema } from '../contracts/json-schema.js';
import { unfencedJson } from '../streams/partial-json.js';

/** What `run/start` records of a run's output schema: a zod schema cannot be stored, its JSON Schema can. */
export const RecordedOutput = z.strictObject({
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/),
  jsonSchema: z.record(z.string(), z.unknown()),
  /** sha256 hex of the canonical JSON Schema: part of the execution-profile fingerprint. */
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  strict: z.boolean(),
});
export type RecordedOutput = z.infer<typeof RecordedOutput>;

/** A run's output schema: what checks the answer (the zod schema, or the recorded JSON Schema converted back) and what is recorded. */
export interface OutputSpec {
  readonly schema: z.ZodType;
  readonly record: RecordedOutput;
}

/** The name the providers give the answer's schema (OpenAI's `json_schema.name`). */
export const OUTPUT_NAME = 'final_answer';

/** zod types no JSON value parses as: an output schema with one could never accept an answer. */
const NEVER_FROM_JSON = new Set(['date', 'bigint', 'map', 'set', 'symbol', 'nan', 'function', 'promise', 'file']);

/**
 * The field path of a JSON Schema location every answer must fill — a chain of object fields from
 * the root, none of them (nor the root) taking null or absence — else nothing: under a union's
 * branch, an optional or nullable field, an array's items or a record's values, an answer can do
 * without it.
 */
function requiredPath(schema: z.ZodType, at: string[]): string[] | undefined {
  const fills = (s: z.ZodType) => {
    try {
      return !s.safeParse(null).success && !s.safeParse(undefined).success;
    } catch {
      return false; // (an async check: not judged here, the answer's validation does)
    }
  };
  if (!fills(schema)) return undefined;
  const path: string[] = [];
  let node = schema;
  for (let i = 0; i < at.length; i += 2) {
    const key = at[i + 1];
    if (at[i] !== 'properties' || key === undefined || !(node instanceof z.ZodObject)) return undefined;
    const field = Object.getOwnPropertyDescriptor(node.shape, key)?.value as z.ZodType | undefined;
    if (!field || !fills(field)) return undefined;
    path.push(key);
    node = field;
  }
  return path;
}

/** Whether `v` is a zod schema (the `output` option's shape). */
export const isZodSchema = (v: unknown): v is z.ZodType => v instanceof z.ZodType;

/**
 * The spec of a zod `output` schema: its JSON Schema (the output side, so objects are closed;
 * the input side for a schema whose output cannot be represented), the digest, and whether
 * OpenAI's strict mode can take it.
 */
export function outputSpec(schema: z.ZodType, where = 'output'): OutputSpec {
  let spec = specs.get(schema);
  if (!spec) specs.set(schema, (spec = writtenSpec(schema, where)));
  return spec;
}
/** Each schema's spec, written once (a schema given to every run is not written again). */
const specs = new WeakMap<z.ZodType, OutputSpec>();

function writtenSpec(schema: z.ZodType, where: string): OutputSpec {
  let json: Record<string, unknown>;
  try {
    json = z.toJSONSchema(schema, { io: 'output' }) as Record<string, unknown>;
  } catch {
    const never: { path: string[]; type: string }[] = [];
    try {
      json = z.toJSONSchema(schema, {
        io: 'input',
        unrepresentable: 'any',
        override: ({ zodSchema, path }) => {
          const type = (zodSchema as { _zod: { def: { type: string } } })._zod.def.type;
          if (NEVER_FROM_JSON.has(type)) never.push({ path: path.map(String), type });
        },
      }) as Record<string, unknown>;
    } catch (e) {
      throw new ValidationError(where, [
        { path: [], message: `the schema cannot be written as JSON Schema: ${(e as Error)?.message ?? e}` },
      ]);
    }
    const required = never.flatMap((n) => {
      const path = requiredPath(schema, n.path);
      return path ? [{ path, type: n.type }] : [];
    });
    if (required.length > 0)
      throw new ValidationError(
        where,
        required.map((n) => ({
          path: n.path,
          message:
            `a ${n.type} never comes out of JSON (the answer is the model's JSON text, and the output is stored as JSON): ` +
            'take a string or a number (z.iso.datetime() for a date) and convert it in the app',
        })),
      );
  }
  delete json.$schema;
  // frozen: one spec serves every run given this schema (a provider that changed it would change the others' requests)
  frozen(json);
  return { schema, record: { name: OUTPUT_NAME, jsonSchema: json, digest: sha256(canonicalJson(json)), strict: strictAllows(json) } };
}

function frozen(v: unknown): void {
  if (typeof v !== 'object' || v === null || Object.isFrozen(v)) return;
  Object.freeze(v);
  for (const x of Object.values(v)) frozen(x);
}

/**
 * The spec of a run whose schema is known only from its `run/start` record (a continue in another
 * process). A recorded schema zod cannot compile back (one written from a schema with parts JSON
 * Schema cannot say, e.g. a transform) cannot check an answer: a ValidationError asking for the
 * run's own schema, never an answer let through unchecked.
 */
export function recordedSpec(record: RecordedOutput, runId: string, where: string): OutputSpec {
  const schema = compiledJsonSchema(record.jsonSchema);
  if (!schema) {
    throw new ValidationError(where, [
      {
        path: ['output'],
        message:
          `run ${runId}'s recorded output schema (digest ${record.digest}) cannot be compiled back into a schema here: ` +
          "give the run's own zod schema as output",
      },
    ]);
  }
  return { schema, record };
}

/**
 * Whether OpenAI's strict structured output takes `schema`: an object at the root, and every
 * object (at any depth) closed (`additionalProperties: false`) with every property required.
 */
export function strictAllows(schema: Record<string, unknown>): boolean {
  if (schema.type !== 'object') return false;
  const objectsClosed = (s: unknown): boolean => {
    if (Array.isArray(s)) return s.every(objectsClosed);
    if (typeof s !== 'object' || s === null) return true;
    const o = s as Record<string, unknown>;
    if (o.type === 'object') {
      const props = (o.properties ?? {}) as Record<string, unknown>;
      const required = Array.isArray(o.required) ? o.required : [];
      if (o.additionalProperties !== false || Object.keys(props).some((k) => !required.includes(k))) return false;
    }
    return Object.values(o).every(objectsClosed);
  };
  return objectsClosed(schema);
}

/**
 * The execution-profile fingerprint of an attempt with output schema `spec`: the tools' and
 * config's fingerprint with the schema's digest folded in (unchanged without a schema).
 */
export const withOutput = (fingerprint: string, spec: OutputSpec | undefined): string =>
  spec ? sha256(canonicalJson({ profile: fingerprint, output: spec.record.digest })) : fingerprint;

/** What the model request carries of a run's output schema. */
export const requestOutputOf = (spec: OutputSpec): ModelRequestOutput => ({
  name: spec.record.name,
  schema: spec.record.jsonSchema,
  strict: spec.record.strict,
});

/**
 * The instruction a provider without a native structured-output mode is given (joined to the
 * system message): answer with JSON of the schema, nothing else.
 */
export const outputInstruction = (spec: OutputSpec): string =>
  'When you give your final answer, answer with JSON only (no prose, no code fence) that matches this JSON Schema:\n' +
  JSON.stringify(spec.record.jsonSchema);

/** `messages` with the output instruction joined to the system message (or a system message of its own first). */
export function withOutputInstruction(messages: readonly Message[], spec: OutputSpec): Message[] {
  const text = outputInstruction(spec);
  const first = messages[0];
  if (first?.role === 'system' && typeof first.content === 'string')
    return [{ ...first, content: `${first.content}\n\n${text}` }, ...messages.slice(1)];
  return [{ role: 'system', content: text }, ...messages];
}

export type CheckedOutput = { ok: true; value: unknown } | { ok: false; issues: string[] };

/**
 * The answer's text checked against the run's schema: parsed as JSON (a code fence around it is
 * taken off), then validated with zod; the issues as `path: message` otherwise. The value kept
 * is the schema's output, which must be JSON (it is stored in `final/message`).
 */
export function checkOutput(spec: OutputSpec, text: string): CheckedOutput {
  let value: unknown;
  try {
    value = JSON.parse(unfencedJson(text));
  } catch (e) {
    return { ok: false, issues: [`(root): the answer is not JSON (${(e as Error).message})`] };
  }
  const r = spec.schema.safeParse(value);
  if (!r.success) return { ok: false, issues: r.error.issues.map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`) };
  if (!JsonValue.safeParse(r.data).success)
    return { ok: false, issues: ["(root): the schema's output is not JSON (a transform to a Date, Map, … cannot be stored in the log)"] };
  return { ok: true, value: r.data };
}

/** The correction the model reads after an answer that failed its schema. */
export const outputCorrection = (issues: readonly string[]): Message => ({
  role: 'user',
  content:
    `Your final answer does not match the required output schema: ${issues.join('; ')}. ` +
    'Answer again with JSON only that matches the schema.',
});
