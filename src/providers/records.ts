/**
 * A JSON object (not an array or null) or `undefined`.
 * @example
 * asRecord(message.providerData?.anthropic)?.content
 */
export function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}
