import { isDeepStrictEqual } from 'node:util';
import { asRecord } from './records.js';

/**
 * The request body with the app's `extraBody` merged in (docs/providers.md, "Options"): a field
 * the adapter did not set is the app's; a list both set (`tools`, `include`) has the adapter's
 * items, then the app's not already there; an object both set (`text`, `output_config`,
 * `stream_options`, `thinking`, …) has the keys of both, the app's winning; any other field both
 * set is the app's. `runOwned` names what the run needs and the app cannot replace while the
 * adapter sets it: a whole field (`true`) or some keys of an object field — the run's output
 * schema (`text.format`, `output_config.format`, `response_format`). Built with data properties
 * only: an app's key is never a setter of the body.
 * @example
 * const ours = { text: { format }, include: ['reasoning.encrypted_content'] };
 * withExtraBody(ours, { text: { verbosity: 'low' }, include: ['x'] }, { text: ['format'] })
 * // { text: { format, verbosity: 'low' }, include: ['reasoning.encrypted_content', 'x'] }
 */
export function withExtraBody(
  body: Record<string, unknown>,
  extra: Record<string, unknown> | undefined,
  runOwned: Readonly<Record<string, true | readonly string[]>> = {},
): Record<string, unknown> {
  if (!extra) return body;
  const fields = new Map(Object.entries(body));
  for (const [key, theirs] of Object.entries(extra)) {
    const ours = fields.get(key);
    const owned = Object.hasOwn(runOwned, key) ? runOwned[key] : undefined;
    if (ours === undefined) fields.set(key, theirs);
    else if (owned === true) continue;
    else if (Array.isArray(ours) && Array.isArray(theirs))
      fields.set(key, [...ours, ...theirs.filter((t) => !ours.some((o) => isDeepStrictEqual(o, t)))]);
    else {
      const o = asRecord(ours);
      const t = asRecord(theirs);
      if (!o || !t) fields.set(key, theirs);
      else {
        const kept = Object.entries(o).filter(([k]) => owned?.includes(k));
        fields.set(key, Object.fromEntries([...Object.entries(o), ...Object.entries(t), ...kept]));
      }
    }
  }
  return Object.fromEntries(fields);
}
