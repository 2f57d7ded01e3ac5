/**
 * Records keyed by outside data (call ids, tool names, input ids, resource keys, JSON keys).
 * A plain object `{}` answers `constructor`, `toString` or `__proto__` from its prototype, and an
 * assignment to `__proto__` changes the prototype instead of storing an entry: a model that names
 * a tool call `constructor` must find no result where none was recorded. Where a shape must stay
 * a plain JSON object (context, payloads, public state), these helpers make it safe; elsewhere use
 * a `Map` or a `Set`.
 */

/**
 * A record with no prototype, filled from `entries`: every key, `__proto__` included, is its own
 * entry.
 * @example
 * const decisions = ownRecord<'approve' | 'deny'>([['constructor', 'approve']]) // decisions.toString === undefined
 */
export function ownRecord<T>(entries: Iterable<readonly [string, T]> = []): Record<string, T> {
  const out = Object.create(null) as Record<string, T>;
  for (const [k, v] of entries) out[k] = v;
  return out;
}

/**
 * The entry `rec` holds itself under `key` (never one inherited from a prototype).
 * @example
 * own({}, 'constructor') // undefined
 */
export function own<T>(rec: Readonly<Record<string, T>> | undefined, key: string): T | undefined {
  return rec !== undefined && Object.hasOwn(rec, key) ? rec[key] : undefined;
}

/**
 * A copy of `rec` (with no prototype) with `key` set to `value`; `rec` is not changed.
 * @example
 * withEntry(results, call.callId, output)
 */
export function withEntry<T>(rec: Readonly<Record<string, T>>, key: string, value: T): Record<string, T> {
  const out = ownRecord(Object.entries(rec));
  out[key] = value;
  return out;
}
