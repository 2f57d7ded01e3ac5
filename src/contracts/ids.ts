import { z } from 'zod';

/** A UTF-16 string with a lone surrogate (which no store can keep as it is: UTF-8 has no form for it). */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
export const hasLoneSurrogate = (s: string): boolean => LONE_SURROGATE.test(s);

/** Whether `s` follows the id rule (`IdInput`) within `max` UTF-16 code units, without building an error (hot paths). */
export const isId = (s: unknown, max = Number.POSITIVE_INFINITY): s is string =>
  typeof s === 'string' && s.length > 0 && s.length <= max && !s.includes('\u0000') && !hasLoneSurrogate(s);

/**
 * The one rule for every id an app hands the runtime or a store — session, run, attempt, input,
 * question, call, inbox entry, event and worker ids, resource keys: a non-empty string with no
 * NUL character and no lone surrogate (well-formed Unicode). Every store keeps such an id exactly:
 * PostgreSQL's text holds no NUL and would turn a lone surrogate into U+FFFD (two ids into one).
 * A field with a length limit adds it (`IdInput.max(200)`). Any other character is fine: spaces,
 * accents, emoji.
 * @example
 * const Entry = z.strictObject({ entryId: IdInput.max(200) })
 */
export const IdInput = z
  .string()
  .min(1)
  .refine((s) => !s.includes('\u0000'), 'must not contain NUL (\\u0000)')
  .refine((s) => !hasLoneSurrogate(s), 'must be well-formed Unicode (it holds a lone surrogate)');

const ID_RULE_MESSAGES = new Set(['must not contain NUL (\\u0000)', 'must be well-formed Unicode (it holds a lone surrogate)']);

/**
 * Whether a zod issue is one of the id rule's alone (an empty string, a NUL, a lone surrogate):
 * what a record logged before the rule may break — an empty resource key or `toolCallId` then
 * passed, and an LMDB store kept any string — and is read as it was written (codec.ts).
 */
export const isIdRuleIssue = (issue: z.core.$ZodIssue): boolean =>
  (issue.code === 'custom' && ID_RULE_MESSAGES.has(issue.message)) ||
  (issue.code === 'too_small' && issue.origin === 'string' && Number(issue.minimum) === 1);

/** The most UTF-16 code units a session id takes. */
export const MAX_SESSION_ID = 400;

/**
 * A session id, as the public API (openSession, submit, waitForResult) and every store take it:
 * the id rule, 1–400 UTF-16 code units.
 */
export const SessionIdInput = IdInput.max(MAX_SESSION_ID);

/** Whether `s` is a valid session id (the rule of `SessionIdInput`), without building an error. */
export const isSessionId = (s: unknown): s is string => isId(s, MAX_SESSION_ID);
