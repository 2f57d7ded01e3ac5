import { AsyncLocalStorage } from 'node:async_hooks';
import { context, ROOT_CONTEXT, type Context, type ContextManager } from '@opentelemetry/api';
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

/** The context manager the Node SDK registers (on AsyncLocalStorage), in a few lines: what a span started inside a tool nests under. */
class AsyncContext implements ContextManager {
  private readonly als = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.als.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A) {
    return this.als.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.als.disable();
    return this;
  }
}

/** Registers an AsyncLocalStorage context manager globally; the returned function removes it. */
export function asyncContext(): () => void {
  context.setGlobalContextManager(new AsyncContext());
  return () => context.disable();
}
