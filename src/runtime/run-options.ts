import { z } from 'zod';
import { isZodSchema, outputSpec } from '../actors/final-output.js';
import { parseInput } from '../contracts/validate.js';
import type { ExecutionResult } from '../contracts/requests.js';

/**
 * Per-run options of `session.run(input, options)` (and fields of `session.execute`'s request):
 * `output`, a zod schema the run's final answer must be JSON of (docs/typed-output.md).
 * @example
 * const { output } = await session.run('Extract the invoice', { output: Invoice }).result
 */
export interface RunOptions<S extends z.ZodType = z.ZodType> {
  output?: S;
}

export const RunOptionsSchema = z.strictObject({
  output: z.custom<z.ZodType>(isZodSchema, 'a zod schema (e.g. z.object({ … }))').optional(),
});

/** An ExecutionResult whose `output` is typed by the run's schema. */
export type TypedResult<T> = Omit<ExecutionResult, 'output'> & {
  /** The final answer parsed and validated against the run's output schema (a run that succeeded, or whose final is delivery_unknown). */
  output?: T;
};

/** A partial object of `T` as its JSON streams: every property, at any depth, may still be missing. */
export type DeepPartial<T> = T extends readonly (infer U)[]
  ? DeepPartial<U>[]
  : T extends object
    ? { [K in keyof T]?: DeepPartial<T[K]> }
    : T;

/** `req` with the run's output schema from session.run's `options` (unknown keys, or an output that is not a zod schema, refused). */
export function withRunOptions<R extends object>(req: R, options: unknown, where = 'session.run'): R & { output?: z.ZodType } {
  const { output } = parseInput(RunOptionsSchema, options, `${where}: options`);
  if (output === undefined) return req;
  outputSpec(output, `${where}: options.output`); // a schema no answer could meet is refused here, as other bad input
  return { ...req, output };
}
