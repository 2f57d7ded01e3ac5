/**
 * Structural types for OpenTelemetry tracing (what `@opentelemetry/api` provides), so that the
 * package never needs the API to be imported or type-checked: it is an optional peer, loaded
 * only when tracing is on.
 */

export type AttributeValue = string | number | boolean | string[] | number[];
export type Attributes = Record<string, AttributeValue | undefined>;

export interface SpanContextLike {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
}

export interface SpanLike {
  spanContext(): SpanContextLike;
  setAttribute(key: string, value: AttributeValue): unknown;
  setAttributes(attributes: Attributes): unknown;
  addEvent(name: string, attributes?: Attributes, time?: number): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: unknown, time?: number): void;
  end(endTime?: number): void;
  isRecording(): boolean;
}

export interface SpanOptionsLike {
  kind?: number;
  attributes?: Attributes;
  links?: { context: SpanContextLike; attributes?: Attributes }[];
  startTime?: number;
}

export interface TracerLike {
  startSpan(name: string, options?: SpanOptionsLike, context?: unknown): SpanLike;
}

export interface TracerProviderLike {
  getTracer(name: string, version?: string): TracerLike;
}

/** The ids of an attempt's span, recorded in its `run/start` so a later attempt can link to it. */
export interface TraceIds {
  traceId: string;
  spanId: string;
}

/** What the run's actors ask of the session's tracer (when tracing is on). */
export interface RunTracer {
  /**
   * Opens the attempt's span (linked to the run's previous attempt, read from the log when this
   * process did not run it); returns its ids for `run/start`, or undefined when not recording.
   * Contract: never throws.
   */
  attemptStarting(a: {
    runId: string;
    attemptId: string;
    runEpoch: number;
    turn: number;
    kind: string;
    runFirstSeq?: number;
  }): Promise<TraceIds | undefined>;
  /** Runs `fn` with the tool call's span active (the tool's own spans become its children). */
  inToolCall<T>(callId: string, fn: () => T): T;
  /** Step `step`'s model call is about to start: its step span opens now, if not yet open. Contract: never throws. */
  stepStarting(step: number): void;
}
