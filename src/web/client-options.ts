/**
 * The options of `actorloop/client` checked before anything is fetched: a value fetch would refuse
 * on every attempt (a relative URL in Node, a header with a line break, an AbortController in
 * place of its signal) is an error at the call, not a stream reconnecting forever. Browser-safe:
 * no Node import, no zod.
 */

/** One problem of an option: where (`['headers', 'x-token']`) and what. */
export interface OptionIssue {
  path: string[];
  message: string;
}

/**
 * Bad options of the client (an unknown key, a wrong type, a value fetch refuses): `name`
 * 'ValidationError' and `code` 'validation', so `isValidationError` of `actorloop` holds for it
 * (the client imports no zod).
 * @example
 * try {
 *   await sessionStream({ url, lastLogSeqq: 3 } as never).next()
 * } catch (e) {
 *   if (e instanceof StreamOptionsError) console.log(e.issues)
 * }
 */
export class StreamOptionsError extends Error {
  override readonly name = 'ValidationError';
  readonly code = 'validation';
  constructor(
    readonly where: string,
    readonly issues: OptionIssue[],
  ) {
    super(`invalid input to ${where}: ${issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`);
  }
}

/** The keys of `sessionStream`'s options. */
export const STREAM_KEYS: ReadonlySet<string> = new Set([
  'url',
  'lastLogSeq',
  'reconnectMs',
  'maxReconnectMs',
  'signal',
  'fetch',
  'headers',
]);
/** `sessionFrames$`' keys: the same but `signal` (unsubscribing ends it). */
export const FRAMES_KEYS: ReadonlySet<string> = new Set([...STREAM_KEYS].filter((k) => k !== 'signal'));
/** `connectSessionView`'s keys: `sessionFrames$`' and `sessionId` (`stop()` ends it). */
export const VIEW_KEYS: ReadonlySet<string> = new Set([...FRAMES_KEYS, 'sessionId']);

/** The longest delay a timer takes (2^31 − 1 ms): setTimeout fires a longer one at once. */
const MAX_DELAY_MS = 2_147_483_647;

/** An HTTP header name: a token (RFC 9110 §5.1). */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What fetch refuses in a header value: NUL, CR, LF, or a character past U+00FF (not a byte). */
const BAD_VALUE = /[\0\r\n]|[^\0-\u00ff]/;

const isPlainObject = (v: unknown): v is Record<string, unknown> => {
  if (typeof v !== 'object' || v === null) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
};

/** An AbortSignal as fetch takes it (an `aborted` flag and its listeners), from this realm or another. */
const isSignal = (v: unknown): boolean => {
  const s = v as Partial<AbortSignal> | null;
  return (
    typeof s === 'object' &&
    s !== null &&
    typeof s.aborted === 'boolean' &&
    typeof s.addEventListener === 'function' &&
    typeof s.removeEventListener === 'function'
  );
};

/**
 * Why fetch cannot reach `url`, or undefined: it must resolve (against the page's location where
 * there is one; Node has none, so there it is absolute) to an http(s) URL with no credentials.
 */
function urlIssue(url: string): string | undefined {
  const href = (globalThis as { location?: { href?: unknown } }).location?.href;
  let parsed: URL;
  try {
    parsed = new URL(url, typeof href === 'string' ? href : undefined);
  } catch {
    return (
      `${JSON.stringify(url.slice(0, 200))} is not a URL fetch can reach: give an absolute http(s) URL ` +
      '(here there is no page location to resolve a relative one against)'
    );
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return `expected an http(s) URL (got ${parsed.protocol})`;
  if (parsed.username !== '' || parsed.password !== '')
    return 'a URL with credentials (user:password@) is refused by fetch: send them in a header';
  return undefined;
}

function headerIssues(headers: unknown): OptionIssue[] {
  if (headers === undefined) return [];
  if (!isPlainObject(headers)) return [{ path: ['headers'], message: 'expected a plain object of header names to string values' }];
  const issues: OptionIssue[] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (!TOKEN.test(name)) issues.push({ path: ['headers', name], message: 'not a header name (an HTTP token)' });
    else if (typeof value !== 'string') issues.push({ path: ['headers', name], message: 'expected a string' });
    else if (BAD_VALUE.test(value))
      issues.push({ path: ['headers', name], message: 'a header value holds no NUL, CR or LF and no character past U+00FF' });
  }
  return issues;
}

/**
 * Throws StreamOptionsError at `where` unless `options` is an object of the `keys` given, each
 * of its type: `url` a string (checked as fetch would take it, unless the app's own `fetch`
 * reads it), `lastLogSeq` a whole number, the delays whole numbers a timer takes, `signal` an
 * AbortSignal, `fetch` a function, `headers` a plain object of valid header names and values,
 * `sessionId` a non-empty string.
 */
export function checkOptions(options: unknown, where: string, keys: ReadonlySet<string>): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new StreamOptionsError(where, [{ path: [], message: 'expected an object' }]);
  const o = options as Record<string, unknown>;
  const issues: OptionIssue[] = [];
  for (const key of Object.keys(o)) if (!keys.has(key)) issues.push({ path: [], message: `Unrecognized key: "${key}"` });
  const { url } = o;
  if (typeof url !== 'string' || url === '') issues.push({ path: ['url'], message: 'expected the stream URL (a string)' });
  else if (o.fetch === undefined) {
    const why = urlIssue(url);
    if (why) issues.push({ path: ['url'], message: why });
  }
  for (const key of ['lastLogSeq', 'reconnectMs', 'maxReconnectMs'] as const) {
    const v = o[key];
    const max = key === 'lastLogSeq' ? Number.MAX_SAFE_INTEGER : MAX_DELAY_MS;
    const ok = v === undefined || (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= max);
    if (!ok) issues.push({ path: [key], message: `expected a whole number from 0 to ${max}` });
  }
  if (o.signal !== undefined && !isSignal(o.signal))
    issues.push({ path: ['signal'], message: "expected an AbortSignal (an AbortController's `signal`, not the controller)" });
  if (o.fetch !== undefined && typeof o.fetch !== 'function') issues.push({ path: ['fetch'], message: 'expected a function' });
  issues.push(...headerIssues(o.headers));
  if (keys.has('sessionId')) issues.push(...sessionIdIssues(o.sessionId));
  if (issues.length > 0) throw new StreamOptionsError(where, issues);
}

/** The issue of a session id that is not a non-empty string (none for one that is). */
export const sessionIdIssues = (id: unknown): OptionIssue[] =>
  typeof id === 'string' && id !== '' ? [] : [{ path: ['sessionId'], message: 'expected the session id (a non-empty string)' }];
