// Public API of actorloop (DESIGN §6). Explicit named exports only.
export { createRuntime } from './runtime/runtime.js';
export type { Runtime } from './runtime/runtime.js';
export type { ServeHandle } from './runtime/serve.js';
export {
  entryIdOf,
  InboxEntry,
  InboxOutcome,
  InboxReceipt,
  inputRunId,
  LeaseInfo,
  LeaseLostError,
  ServeOptions,
  StoredInboxEntry,
  WaitForResultOptions,
  WorkerInfo,
} from './contracts/inbox.js';
export type { ServeEvent } from './contracts/inbox.js';
export type { ClaimedSession, SubmitOutcome, WorkerRegistration, WorkStore } from './persistence/work-store.js';
export type { RuntimeOptions } from './runtime/options.js';
export { ExecutionSession } from './runtime/execution-session.js';
export type { SessionSnapshot, SessionStatus, TurnContext } from './runtime/execution-session.js';
export type { RunHandle } from './runtime/run-handle.js';
export type { DeepPartial, RunOptions, TypedResult } from './runtime/run-options.js';
export { OpenSessionOptions } from './runtime/open-options.js';
export type { RuntimeRunOptions, SessionRunHandle } from './runtime/runtime-run.js';
export type { ApprovalReceipt } from './runtime/per-call-approvals.js';
export { parsePartialJson } from './streams/partial-json.js';
export type { DeliveryOwner, FinalAnswer, FinalVerifier, Pricing, ToolVerifier } from './contracts/hooks.js';
export { systemClock } from './contracts/clock.js';
export type { Clock, IdSource } from './contracts/clock.js';

export { lmdbStore, LmdbStoreOptions } from './persistence/lmdb-store.js';
export { memoryStore } from './persistence/memory-store.js';
export { migratePostgres, postgresStore, PostgresStoreOptions } from './persistence/postgres/postgres-store.js';
export { postgresRateBuckets, PostgresRateBucketsOptions } from './persistence/postgres/rate.js';
export type { SharedBuckets, SharedBucket } from './contracts/rate-limits.js';
export type { RateLimitInput } from './contracts/rate-limits.js';
export { ProviderRateLimits } from './contracts/provider-limits.js';
export type { PostgresStoreExtras } from './persistence/postgres/postgres-store.js';
export type { PgPool, PgPoolClient, PgQuery, PgResult } from './persistence/postgres/pg-types.js';
export { repairStore, StoreProblem, verifyStore, VerifyOptions, VerifyReport } from './persistence/verify.js';
export type { RepairReport } from './persistence/verify.js';
export type { AttachResult, EventStore, ReadRange } from './persistence/event-store.js';
export { SessionHead } from './persistence/head.js';
export type { StoredSurface, SurfaceChunk } from './persistence/surface.js';

export { defineTool } from './tools/define-tool.js';
export { defineAgent, DEFAULT_AGENT, type Agent, type AgentOptions } from './tools/define-agent.js';
export { agentTool, type AgentToolOptions } from './tools/agent-tool.js';
export type { AnyTool, ToolContext, ToolDefinition, ToolList, ToolOptions, ToolReturn } from './tools/define-tool.js';
export type { JsonValue } from './contracts/json.js';
export { mcpTools, IDEMPOTENCY_META_KEY } from './tools/mcp-tools.js';
export type { McpToolsOptions, McpReconcileCall } from './tools/mcp-options.js';
export type { McpClientLike, McpToolInfo, McpCallResult, McpRequestOptions, JsonSchemaValidatorLike } from './tools/mcp-client.js';

export { scriptedModel } from './providers/scripted.js';
export type { ScriptedModel, ScriptedStep } from './providers/scripted.js';
export { openaiModel, openaiModelFromEnv, OpenAIModelOptions } from './providers/openai.js';
export type { OpenAIClient, OpenAIProviderData } from './providers/openai.js';
export { openaiResponsesModel, openaiResponsesModelFromEnv, OpenAIResponsesModelOptions } from './providers/openai-responses.js';
export type { OpenAIResponsesClient, OpenAIResponsesProviderData } from './providers/openai-responses.js';
export { anthropicModel, anthropicModelFromEnv, AnthropicModelOptions } from './providers/anthropic.js';
export type { AnthropicClient, AnthropicProviderData, AnthropicThinking } from './providers/anthropic.js';

export { runMachine } from './machines/run.machine.js';
export type { RunContext, RunEvent, RunInput } from './machines/run.machine.js';
export { sessionMachine } from './machines/session.machine.js';
export type { SessionContext, SessionEvent, SessionInput, SessionRest } from './machines/session.machine.js';
export { toolBatchMachine } from './machines/tool-batch.machine.js';
export type { ToolBatchContext, ToolBatchInput } from './machines/tool-batch.machine.js';

export { EnvelopeStream } from './streams/envelopes.js';
export { SubscriberHub, SubscribeOptions } from './streams/subscribers.js';
export type { DeliveryError, SubscriberListener, Unsubscribe } from './streams/subscribers.js';
export { sessionEvents, SessionEventsOptions } from './web/session-events.js';
export { webHandler, WebHandlerOptions } from './web/web-handler.js';
export type { Authorize, AuthorizeContext, WebAction, WebRoute } from './web/web-handler.js';
export { nodeListener, NodeListenerOptions } from './web/node-http.js';
export { uiMessageStream, UIMessageStreamOptions, UI_MESSAGE_STREAM_HEADERS } from './web/ui-message-stream.js';
export { UIChunkMapper } from './web/ui-chunks.js';
export type { ReplyTarget, UIChunkMapperOptions } from './web/ui-chunks.js';
export { replyMessageId } from './web/ui-protocol.js';
export type { UIChunk, UIDataChunk, UIMessageMetadata } from './web/ui-protocol.js';
export { uiMessagesOf, UIMessageBuilder } from './web/ui-messages.js';
export type { UIMessage, UIMessagePart } from './web/ui-messages.js';
export { ChatRequestBody } from './web/chat-routes.js';
export type { SessionListItem } from './web/chat-routes.js';
export type { ChildFrame, CommittedFrame, DroppedFrame, Frame, LiveFrame, ReadyFrame, StreamErrorFrame, WireRecord } from './web/wire.js';
export { renderTimeline } from './cli/timeline.js';
export type { TimelineOptions } from './cli/timeline.js';
export { foldOpenRun } from './persistence/open-run.js';
export type { OpenRunState } from './persistence/open-run.js';
export type { Envelope, LiveEvent } from './streams/envelopes.js';

export { LoopBudget, LoopConfig, DEFAULT_COMPACTION_PROMPT } from './contracts/config.js';
export { BudgetSpending, Spending } from './contracts/spending.js';
export { budgetLeft } from './contracts/reservation.js';
export type { BudgetLeft, Overrun, Reservation } from './contracts/reservation.js';
export { EventDraft, EventPayloads, EventRecord, EventType, PendingRequest, SCHEMA_VERSION, SurfaceOp } from './contracts/events.js';
export type { Event, PayloadOf } from './contracts/events.js';
export { FinishReason, Message, ToolCall, Usage, type ModelMessage } from './contracts/message.js';
export {
  BlobRef,
  Content,
  ContentPart,
  contentDisplay,
  contentText,
  FilePart,
  ImagePart,
  InputContent,
  InputContentPart,
  StoredContent,
  StoredContentPart,
  TextPart,
} from './contracts/content.js';
export type { BlobStore } from './persistence/blob-store.js';
export { ContentLimits } from './persistence/content-parts.js';
export type {
  ContentSupport,
  ModelProvider,
  ModelRequest,
  ModelRequestOutput,
  ModelResponse,
  ModelStreamEvent,
} from './contracts/model.js';
export {
  ExecutionRequest,
  ExecutionResult,
  InputEnvelope,
  InputReceipt,
  Outcome,
  RecoveryOutcome,
  Recovered,
  RunRequest,
  RunStatus,
  StopReceipt,
  StopRequest,
  UncertainCall,
  UncertainResolution,
} from './contracts/requests.js';
export { ToolMode, ToolOutcome, ToolSpec } from './contracts/tools.js';
export {
  ActorloopError,
  BudgetExhaustedError,
  CancelledError,
  CapacityError,
  CorruptLogError,
  ExecutionBusy,
  InvariantViolation,
  LogDivergedError,
  ProtocolExhaustedError,
  OutputValidationError,
  ProviderError,
  SequenceConflictError,
  SessionHeldError,
  SessionSteeringConflict,
  StaleWriterError,
  StoreClosedError,
  StoreUnavailableError,
  StoreError,
  UnknownSchemaVersionError,
  UnknownAgentError,
  isUnknownAgentError,
  InputRejectedError,
  isInputRejectedError,
  ValidationError,
  isBudgetExhaustedError,
  isCancelledError,
  isCapacityError,
  isCorruptLogError,
  isExecutionBusy,
  isInvariantViolation,
  isLogDivergedError,
  isProtocolExhaustedError,
  isOutputValidationError,
  isProviderError,
  isSequenceConflictError,
  isSessionHeldError,
  isSessionSteeringConflict,
  isStaleWriterError,
  isStoreClosedError,
  isStoreUnavailableError,
  isStoreError,
  isUnknownSchemaVersionError,
  isValidationError,
} from './contracts/errors.js';
export type { SessionHolder } from './contracts/errors.js';
export type { SessionHolders } from './persistence/holders.js';
