import { contentDisplay } from '../contracts/content.js';
import type { ToolOutcome } from '../contracts/tools.js';
import type { Attributes, SpanLike } from '../contracts/tracing.js';

const STATUS_ERROR = 2;

/** The attributes every tool call's span has (GenAI `execute_tool`), besides the attempt's. */
export function toolSpanAttributes(name: string, callId: string, mode: string, logSeq: number): Attributes {
  return {
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': name,
    'gen_ai.tool.call.id': callId,
    'gen_ai.tool.type': 'function',
    'actorloop.tool.mode': mode,
    'actorloop.log.seq': logSeq,
  };
}

/** The text an outcome carries (what the model reads of it), recorded only with `recordContent`. */
function contentOf(outcome: ToolOutcome): string {
  if (outcome.kind === 'completed') return contentDisplay(outcome.content);
  if (outcome.kind === 'skipped') return outcome.reason;
  return (outcome.kind === 'cancelled' ? outcome.partialContent : outcome.content) ?? '';
}

/**
 * Ends a tool call's span with its outcome. A tool's outcome is data, not an exception: an error
 * result, a cancelled or an uncertain call sets status ERROR and `error.type` (no `exception`
 * event). The status message is the outcome kind, or for an error result a fixed sentence; the
 * tool's own text (which may hold what it read or was given) is there only with `recordContent`.
 */
export function endToolSpan(span: SpanLike, outcome: ToolOutcome, logSeq: number | undefined, recordContent: boolean, end: number): void {
  const isError = outcome.kind === 'completed' && outcome.isError;
  span.setAttributes({
    'actorloop.tool.outcome': outcome.kind,
    'actorloop.tool.is_error': isError,
    ...(logSeq !== undefined ? { 'actorloop.tool_result.seq': logSeq } : {}),
    ...(recordContent ? { 'gen_ai.tool.call.result': contentOf(outcome) } : {}),
  });
  if (isError || outcome.kind.startsWith('uncertain') || outcome.kind === 'cancelled') {
    span.setAttribute('error.type', isError ? 'tool_error' : outcome.kind);
    const message = !isError ? outcome.kind : recordContent ? contentOf(outcome).slice(0, 200) : 'the tool returned an error result';
    span.setStatus({ code: STATUS_ERROR, message });
  }
  span.end(end);
}
