import type { PendingRequest } from '../contracts/events.js';
import type { WireRecord } from './wire.js';

/**
 * The chunks of the AI SDK's UI message stream protocol (`x-vercel-ai-ui-message-stream: v1`,
 * the `UIMessageChunk` union of the `ai` package) that actorloop sends. Declared here so that
 * actorloop does not depend on `ai`; test/web/ui-chunks.test.ts checks each against the AI SDK's
 * own schema. Browser-safe: types and pure functions only.
 */
export type UIChunk =
  | { type: 'start'; messageId: string; messageMetadata?: UIMessageMetadata }
  | { type: 'finish'; finishReason?: 'stop' | 'error' | 'other' | 'tool-calls'; messageMetadata?: UIMessageMetadata }
  | { type: 'start-step' }
  | { type: 'finish-step' }
  | { type: 'reset-step' }
  | { type: 'text-start' | 'text-end' | 'reasoning-start' | 'reasoning-end'; id: string }
  | { type: 'text-delta' | 'reasoning-delta'; id: string; delta: string }
  | { type: 'tool-input-available'; toolCallId: string; toolName: string; input: unknown }
  | { type: 'tool-input-error'; toolCallId: string; toolName: string; input: unknown; errorText: string }
  | { type: 'tool-approval-request'; approvalId: string; toolCallId: string }
  | { type: 'tool-approval-response'; approvalId: string; approved: boolean }
  | { type: 'tool-output-available'; toolCallId: string; output: unknown }
  | { type: 'tool-output-error'; toolCallId: string; errorText: string }
  | { type: 'tool-output-denied'; toolCallId: string }
  | { type: 'error'; errorText: string }
  | { type: 'steering-message'; id: string; parts: { type: 'text'; text: string }[] }
  | UIDataChunk;

/** actorloop's own events, as AI SDK data parts (`data-actorloop-*`); docs/web.md lists them. */
export type UIDataChunk =
  | { type: 'data-actorloop-run'; id: string; data: { runId: string; status: string; kind?: string; error?: string } }
  | { type: 'data-actorloop-resumed'; id: string; data: { seq: number } }
  | { type: 'data-actorloop-final'; id: string; data: { content: string; output?: unknown } }
  | { type: 'data-actorloop-question'; id: string; data: PendingRequest }
  | { type: 'data-actorloop-verification'; id: string; data: { target: string; reason: string; callId?: string } }
  | { type: 'data-actorloop-tool-progress'; id: string; data: { callId: string; name: string; update: unknown }; transient: true };

/** The `metadata` of an assistant message: the session and where its reply starts in the log. */
export interface UIMessageMetadata {
  sessionId?: string;
  /** The log position of the user message this reply answers. */
  fromSeq?: number;
}

/** The id of the assistant message that answers the user message with this id. */
export const replyMessageId = (userMessageId: string): string => `${userMessageId}-reply`;
/**
 * The id a user message gets in the UI: its input's id (a steer's on the message, a prompt's on
 * the run/start just before it: `runInputId`), else its log position.
 */
export const userMessageId = (r: WireRecord, runInputId?: string): string =>
  typeof r.payload.inputId === 'string' ? r.payload.inputId : (runInputId ?? `u${r.seq}`);
/** The approval id of a call waiting for approval (one per call, as the AI SDK asks). */
export const approvalIdOf = (callId: string): string => `approve-${callId}`;
