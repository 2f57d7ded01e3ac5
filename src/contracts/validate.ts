import type { z } from 'zod';
import { ValidationError } from './errors.js';

/**
 * Parses `input` with `schema` at a public boundary; a failure becomes a `ValidationError` naming
 * `where` and every issue.
 * @example
 * const opts = parseInput(StoreOptions, raw, 'lmdbStore')
 */
export function parseInput<S extends z.ZodType>(schema: S, input: unknown, where: string): z.output<S> {
  const r = schema.safeParse(input);
  if (r.success) return r.data;
  throw new ValidationError(
    where,
    r.error.issues.map((i) => ({ path: i.path.map((p) => (typeof p === 'symbol' ? String(p) : p)), message: i.message })),
  );
}
