import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';

/** A tracer provider that keeps every ended span in memory. */
export function memoryTracing(): { provider: BasicTracerProvider; exporter: InMemorySpanExporter; spans: () => ReadableSpan[] } {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { provider, exporter, spans: () => exporter.getFinishedSpans() };
}

/** The spans as an indented tree of names (children in start order), for reading a trace at a glance. */
export function tree(spans: readonly ReadableSpan[]): string {
  const byParent = new Map<string, ReadableSpan[]>();
  const ids = new Set(spans.map((s) => s.spanContext().spanId));
  for (const s of spans) {
    const p = s.parentSpanContext?.spanId;
    const key = p && ids.has(p) ? p : '';
    byParent.set(key, [...(byParent.get(key) ?? []), s]);
  }
  const lines: string[] = [];
  const walk = (key: string, depth: number) => {
    const kids = [...(byParent.get(key) ?? [])].sort((a, b) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1]);
    for (const s of kids) {
      const status = s.status.code === 2 ? ' !' : '';
      lines.push(`${'  '.repeat(depth)}${s.name}${status}`);
      walk(s.spanContext().spanId, depth + 1);
    }
  };
  walk('', 0);
  return lines.join('\n');
}
