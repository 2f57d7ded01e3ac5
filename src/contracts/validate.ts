import type { z } from 'zod';
import { ValidationError } from './errors.js';

/**
 * Parses `input` with `schema` at a public boundary; a failure becomes a `ValidationError` naming
 * `where` and every issue. Input whose getters throw while it is read (a proxy, an accessor) is
 * a ValidationError too, naming the property, never the getter's own error.
 * @example
 * const opts = parseInput(StoreOptions, raw, 'lmdbStore')
 */
export function parseInput<S extends z.ZodType>(schema: S, input: unknown, where: string): z.output<S> {
  let r: ReturnType<S['safeParse']>;
  try {
    r = schema.safeParse(input) as ReturnType<S['safeParse']>;
  } catch (e) {
    throw unreadable(input, where, e);
  }
  if (r.success) return r.data as z.output<S>;
  throw new ValidationError(
    where,
    r.error!.issues.flatMap((i) => issuesOf(i as Issue, [])),
  );
}

type Issue = { code?: string; path: PropertyKey[]; message: string; errors?: Issue[][] };
type Path = (string | number)[];

/**
 * An issue as the caller reads it. A union that matched no option reports the issues of the
 * option that got furthest into the input, through unions inside it (a message with a wrong role:
 * "role: …", not "Invalid input" nor "kind: …" of the request form beside it); the first on a tie.
 */
function issuesOf(issue: Issue, prefix: Path): { path: Path; message: string }[] {
  const path = [...prefix, ...issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p))];
  if (issue.code === 'invalid_union' && issue.errors?.length) {
    const best = issue.errors.reduce((a, b) => (depthOf(b) > depthOf(a) ? b : a));
    if (depthOf(best) > 0) return best.flatMap((e) => issuesOf(e, path));
    // no option got into it: what each would take ("expected string, received number; or expected array, …")
    const alone = issue.errors.map((o) =>
      o.length === 1 && o[0]!.path.length === 0 ? o[0]!.message.replace(/^Invalid input: /, '') : undefined,
    );
    if (alone.every((m) => m !== undefined)) return [{ path, message: `Invalid input: ${[...new Set(alone)].join('; or ')}` }];
  }
  return [{ path, message: issue.message }];
}

/** How far into the input an option's issues reach: their paths, and the furthest option of a union among them. */
function depthOf(issues: Issue[]): number {
  return Math.max(
    0,
    ...issues.map((e) => e.path.length + (e.code === 'invalid_union' && e.errors?.length ? Math.max(...e.errors.map(depthOf)) : 0)),
  );
}

/** The ValidationError for input that threw while it was read, naming the first property that throws. */
export function unreadable(input: unknown, where: string, error: unknown): ValidationError {
  const path = throwingPath(input, 0) ?? [];
  return new ValidationError(where, [{ path, message: `reading it threw: ${error instanceof Error ? error.message : String(error)}` }]);
}

/** The path of the first property whose read throws, searched a few levels deep. */
function throwingPath(value: unknown, depth: number): (string | number)[] | undefined {
  if (depth > 6 || value === null || (typeof value !== 'object' && typeof value !== 'function')) return undefined;
  let keys: string[];
  try {
    keys = Object.keys(value as object);
  } catch {
    return []; // a proxy whose ownKeys trap throws: the value itself
  }
  for (const k of keys) {
    let v: unknown;
    try {
      // eslint-disable-next-line actorloop/no-outside-key -- k is one of value's own keys (Object.keys above)
      v = (value as Record<string, unknown>)[k];
    } catch {
      return [Array.isArray(value) ? Number(k) : k];
    }
    const inner = throwingPath(v, depth + 1);
    if (inner) return [Array.isArray(value) ? Number(k) : k, ...inner];
  }
  return undefined;
}
