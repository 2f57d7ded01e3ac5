import type { SessionServices } from '../actors/session-services.js';
import type { Message } from '../contracts/message.js';
import { canonicalJson } from '../persistence/codec.js';
import type { LogWriter } from '../persistence/log-writer.js';
import type { SessionProjection } from '../persistence/projection.js';
import { estimateTokens, sha256 } from '../persistence/surface.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { SubscriberHub } from '../streams/subscribers.js';
import { steersOf, type InputQueue } from './input-queue.js';
import type { ResolvedRuntimeOptions } from './options.js';
import type { SessionTracer } from './tracing.js';
import type { CallLimiter } from './rate-limits.js';

/** System prompt and bootstrap messages, before every session's surface: built once per runtime. */
export interface SessionPrefix {
  messages: Message[];
  digest: string;
  tokens: number;
}

/** The prefix of `o`'s sessions: its system prompt, then its bootstrap messages. */
export function sessionPrefix(o: Pick<ResolvedRuntimeOptions, 'systemPrompt' | 'bootstrapMessages'>): SessionPrefix {
  const messages: Message[] = [
    ...(o.systemPrompt !== undefined ? [{ role: 'system' as const, content: o.systemPrompt }] : []),
    ...o.bootstrapMessages,
  ];
  return { messages, digest: sha256(canonicalJson(messages)), tokens: messages.reduce((n, m) => n + estimateTokens(m), 0) };
}

/** What one session opened with, that its services are made of. */
export interface OpenedParts {
  sessionId: string;
  sessionInstanceId: string;
  writer: LogWriter;
  projection: SessionProjection;
  prefix: SessionPrefix;
  queue: InputQueue;
  hub: SubscriberHub;
  stream: EnvelopeStream;
  tracer: SessionTracer | undefined;
  limiter: CallLimiter | undefined;
}

/**
 * A session's services, whole: nothing assigns them later (an attempt's tools and output
 * schema are its run input).
 */
export function sessionServices(o: ResolvedRuntimeOptions, p: OpenedParts): SessionServices {
  const { tracer, projection, hub, stream } = p;
  return {
    sessionId: p.sessionId,
    sessionInstanceId: p.sessionInstanceId,
    writer: p.writer,
    surface: projection.surface,
    model: tracer ? tracer.traceModel(o.model) : o.model,
    prefix: p.prefix.messages,
    prefixDigest: p.prefix.digest,
    prefixTokens: p.prefix.tokens,
    config: o.config,
    budget: o.budget,
    ...(o.pricing ? { pricing: o.pricing } : {}),
    ...(o.delivery ? { delivery: o.delivery } : {}),
    ...(o.verifier ? { verifier: o.verifier } : {}),
    ...(o.finalVerifier ? { finalVerifier: o.finalVerifier } : {}),
    heldLocks: projection.heldLocks,
    callSeqs: projection.callSeqs,
    clock: o.clock,
    approvalFor: o.approvalFor,
    ...steersOf(p.queue),
    backpressure: () => hub.whenWritable(),
    emit: (event, logSeq) => stream.publish(event, logSeq),
    ...(tracer ? { tracer } : {}),
    ...(p.limiter ? { rateLimiter: p.limiter } : {}),
  };
}
