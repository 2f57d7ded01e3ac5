import { ValidationError } from '../contracts/errors.js';
import { createRequire } from 'node:module';
import { z } from 'zod';
import type { SpanLike, TracerLike, TracerProviderLike } from '../contracts/tracing.js';

/** The part of `@opentelemetry/api` the tracer uses. */
interface OtelApi {
  trace: { getTracer(name: string, version?: string): TracerLike; setSpan(context: unknown, span: SpanLike): unknown };
  context: { active(): unknown; with<T>(context: unknown, fn: () => T): T };
}

/** The `tracing` runtime option. */
export const TracingOptions = z.union([
  z.literal(false),
  z.strictObject({
    /** Spans go to this provider's tracer (default: the globally registered one). */
    tracerProvider: z
      .custom<TracerProviderLike>((v) => typeof (v as TracerProviderLike | undefined)?.getTracer === 'function', 'a TracerProvider')
      .optional(),
    /** Or to this tracer. */
    tracer: z.custom<TracerLike>((v) => typeof (v as TracerLike | undefined)?.startSpan === 'function', 'a Tracer').optional(),
    /** Put prompts, model output, tool arguments and results in spans (default false). */
    recordContent: z.boolean().default(false),
  }),
]);
export type TracingOptions = z.input<typeof TracingOptions>;

let api: OtelApi | null | undefined;
/** `@opentelemetry/api`, loaded (synchronously) the first time tracing is asked for; null when absent. */
function loadApi(): OtelApi | null {
  if (api !== undefined) return api;
  try {
    api = createRequire(import.meta.url)('@opentelemetry/api') as OtelApi;
  } catch {
    api = null;
  }
  return api;
}

/** What the runtime traces with, or undefined (tracing off: the option is false, or no API is installed and none was asked for). */
export interface Tracing {
  tracer: TracerLike;
  api: OtelApi;
  recordContent: boolean;
}

/** What the `tracing` option (checked with the runtime's options) asks for. */
export function resolveTracing(o: z.output<typeof TracingOptions> | undefined): Tracing | undefined {
  if (o === false) return undefined;
  const otel = loadApi();
  if (!otel) {
    if (o === undefined) return undefined;
    throw new ValidationError('createRuntime', [
      { path: ['tracing'], message: 'needs the optional peer dependency @opentelemetry/api: npm install @opentelemetry/api' },
    ]);
  }
  const tracer = o?.tracer ?? o?.tracerProvider?.getTracer('actorloop') ?? otel.trace.getTracer('actorloop');
  return { tracer, api: otel, recordContent: o?.recordContent ?? false };
}
