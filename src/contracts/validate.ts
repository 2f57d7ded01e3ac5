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
 * option that matched best — the one that got furthest into the input, through unions inside it,
 * and on a tie the one with the fewest issues, then the first: a message with a wrong role says
 * "role: …", not "Invalid input" nor the request form's "kind: …"; a request form with one bad
 * field names that field, not the message form's role, content and unknown keys. Where no option
 * got in, it says what each would take ("expected string, received number; or expected array, …").
 */
function issuesOf(issue: Issue, prefix: Path): { path: Path; message: string }[] {
  const path = [...prefix, ...issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p))];
  if (issue.code === 'invalid_union' && issue.errors?.length) {
    const best = bestOption(issue.errors);
    if (best.depth > 0) return best.issues.flatMap((e) => issuesOf(e, path));
    const alone = wouldTake(issue);
    // (an option that says no more than "Invalid input" — a custom check — adds nothing to the list)
    const said = alone?.filter((m) => m !== 'Invalid input');
    if (said?.length) return [{ path, message: `Invalid input: ${[...new Set(said)].join('; or ')}` }];
  }
  return [{ path, message: issue.message }];
}

type Reach = { depth: number; count: number };

/** The union option that matched best (see issuesOf), with its reach. */
function bestOption(options: Issue[][]): Reach & { issues: Issue[] } {
  let best = { issues: options[0]!, ...reach(options[0]!) };
  for (const o of options.slice(1)) {
    const r = reach(o);
    if (r.depth > best.depth || (r.depth === best.depth && r.count < best.count)) best = { issues: o, ...r };
  }
  return best;
}

/** How far into the input an option's issues reach (their paths, through its best union options) and how many they are. */
function reach(issues: Issue[]): Reach {
  let depth = 0;
  let count = 0;
  for (const e of issues) {
    const inner = e.code === 'invalid_union' && e.errors?.length ? bestOption(e.errors) : { depth: 0, count: 1 };
    depth = Math.max(depth, e.path.length + inner.depth);
    count += inner.count;
  }
  return { depth, count };
}

/** What each option of a union none got into would take (a union option's own options listed in its place), or nothing. */
function wouldTake(issue: Issue): string[] | undefined {
  const out: string[] = [];
  for (const o of issue.errors ?? []) {
    const only = o.length === 1 && o[0]!.path.length === 0 ? o[0]! : undefined;
    if (!only) return undefined;
    const inner = only.code === 'invalid_union' && only.errors?.length ? wouldTake(only) : [only.message.replace(/^Invalid input: /, '')];
    if (!inner) return undefined;
    out.push(...inner);
  }
  return out;
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
