/**
 * Secrets never reach the log: a provider's error text can echo the API key it was sent (a proxy
 * quoting the request, an "invalid key sk-…" message), and what is logged of a failed call —
 * `assistant/attempt` and `run/end` — is that text. Redaction replaces the client's own key(s)
 * wherever they appear, and the value of any `Authorization`, `api-key` or `x-api-key` header
 * (and any `Bearer` token) quoted in the text, with `[redacted]`.
 */
export const REDACTED = '[redacted]';

// `Authorization: Bearer sk-…`, `"x-api-key":"…"`, `api-key=…`: the name, its separator and any
// quote are kept (also JSON-escaped quotes, `\"`), the value goes
const HEADER =
  /\b((?:x-)?api[-_]key|authorization)((?:\\?["'])?\s*[:=]\s*(?:\\?["'])?)(?:(bearer|basic)\s+)?(?!\[redacted\])([^\s"'\\,;}\]]+)/gi;
const BEARER = /\bbearer\s+[A-Za-z0-9._~+/=-]{8,}/gi;

/** `text` with every secret (keys shorter than 8 characters are not secrets worth a search) and header value redacted. */
export function redactSecrets(text: string, secrets: readonly (string | null | undefined)[] = []): string {
  let out = text;
  for (const s of secrets) if (typeof s === 'string' && s.length >= 8) out = out.split(s).join(REDACTED);
  return out
    .replace(HEADER, (_m, name: string, sep: string, scheme: string | undefined) => `${name}${sep}${scheme ? `${scheme} ` : ''}${REDACTED}`)
    .replace(BEARER, (m) => `${m.slice(0, 6)} ${REDACTED}`);
}

/** The credentials an `openai` or `@anthropic-ai/sdk` client holds (`apiKey`, `authToken`). */
export function clientSecrets(client: object): string[] {
  const c = client as { apiKey?: unknown; authToken?: unknown };
  return [c.apiKey, c.authToken].filter((v): v is string => typeof v === 'string');
}
