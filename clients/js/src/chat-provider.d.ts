// Types of chat-provider.js: the gateway as a provider for @ant-design/x-sdk's useXChat (2.9).
import type {
  AbstractChatProvider, AbstractXRequestClass, XRequestOptions,
} from "@ant-design/x-sdk";

import type {
  AgentError, AgentEvent, AgentState, ApprovalState, ArtifactState, MessageContent,
  MessageState, ReasoningState, RunState, TaskState, ToolCallState,
} from "./agent-reducer.js";

/** The assistant message of one gateway run, folded from its AgentEvents. */
export interface AgentChatAssistantMessage {
  role: "assistant";
  /** The run's assistant messages' text, joined by a blank line. */
  content: string;
  runId: string | undefined;
  status: RunState["status"];
  error?: AgentError;
  reason?: string;
  messages: MessageState[];
  reasoning: ReasoningState[];
  toolCalls: ToolCallState[];
  approvals: ApprovalState[];
  tasks: TaskState[];
  artifacts: ArtifactState[];
  /** The reduced state the message was folded from (the next event folds into it). */
  state: AgentState;
}
export interface AgentChatUserMessage { role: "user"; content: string }
export type AgentChatMessage = AgentChatUserMessage | AgentChatAssistantMessage;

/** What `onRequest` takes: a prompt, or a full gateway `input`; `reload` re-runs the last input. */
export interface AgentChatInput {
  prompt?: string;
  input?: Record<string, unknown>;
  provider?: string;
  multitask?: "reject" | "interrupt" | "enqueue";
  reload?: boolean;
  [key: string]: unknown;
}
/** A stream chunk: an AgentEvent, or the snapshot a resume falls back to. */
export type AgentChatChunk =
  | AgentEvent
  | { type: "snapshot"; runId: string | undefined; agentState: AgentState };

export interface AgentGatewayRequestOptions
  extends XRequestOptions<AgentChatInput, AgentChatChunk, AgentChatMessage> {
  conversationKey: string;
  provider?: string;
  multitask?: "reject" | "interrupt" | "enqueue";
  accessToken?: string;
  /** ms to wait for `run.cancelled` after `abort()` before the stream is cut (10 000). */
  abortTimeout?: number;
}

export declare class GatewayRequestError extends Error {
  status: number;
  code: string;
  details?: unknown;
}

export declare class AgentGatewayRequest
  extends AbstractXRequestClass<AgentChatInput, AgentChatChunk, AgentChatMessage> {
  constructor(baseURL: string, options: AgentGatewayRequestOptions);
  options: AgentGatewayRequestOptions;
  get asyncHandler(): Promise<void>;
  get isTimeout(): boolean;
  get isStreamTimeout(): boolean;
  get isRequesting(): boolean;
  get manual(): boolean;
  get runId(): string | undefined;
  get idempotencyKey(): string | undefined;
  get conversationKey(): string;
  run(params?: AgentChatInput): boolean;
  /** Cancels the run on the gateway; the request ends once `run.cancelled` arrived. */
  abort(): void;
  /** Closes the stream without cancelling the run. */
  detach(): void;
}

export interface AgentGatewayChatProviderOptions
  extends Partial<Omit<AgentGatewayRequestOptions, "conversationKey">> {
  /** Gateway origin; "" (default) for the page's own origin. */
  baseUrl?: string;
  conversationKey?: string;
  request?: AgentGatewayRequest;
}

export interface CommandAnswer {
  conversationKey: string;
  runId: string;
  command: string;
  targetId: string;
}

export interface ChatMessageInfo {
  id: string;
  message: AgentChatMessage;
  status: "local" | "loading" | "updating" | "success" | "error" | "abort";
}

export declare class AgentGatewayChatProvider
  extends AbstractChatProvider<AgentChatMessage, AgentChatInput, AgentChatChunk> {
  constructor(options?: AgentGatewayChatProviderOptions);
  readonly baseUrl: string;
  get request(): AgentGatewayRequest;
  get conversationKey(): string;
  get gatewayProvider(): string | null;
  setGatewayProvider(name: string | null): void;
  get runId(): string | undefined;
  transformParams(requestParams: Partial<AgentChatInput>,
    options: XRequestOptions<AgentChatInput, AgentChatChunk, AgentChatMessage>): AgentChatInput;
  transformLocalMessage(requestParams: Partial<AgentChatInput>): AgentChatMessage;
  transformMessage(info: {
    originMessage?: AgentChatMessage; chunk: AgentChatChunk; chunks: AgentChatChunk[];
    status: string; responseHeaders: Headers;
  }): AgentChatMessage;
  /** Approves (or, with `data`, approves modified) a waiting approval; with
   * `expectedVersion` only the version the user saw (else 409 `version_mismatch`). */
  approve(
    approvalId: string, data?: unknown, expectedVersion?: string | number,
  ): Promise<CommandAnswer>;
  reject(approvalId: string): Promise<CommandAnswer>;
  submitToolResult(toolCallId: string, result: unknown, isError?: boolean): Promise<CommandAnswer>;
  retryTool(toolCallId: string): Promise<CommandAnswer>;
  abortRun(runId?: string): Promise<{ runId?: string; aborted: boolean }>;
  /** The conversation's history as useXChat messages ([] for a new key). */
  loadMessages(): Promise<ChatMessageInfo[]>;
}

export declare function contentText(content: MessageContent | undefined): string;
export declare function assistantMessage(
  state: AgentState, runId: string | undefined): AgentChatAssistantMessage;
/** `runId`: the request's run when known (the stream's `X-Run-Id` header). */
export declare function foldChunk(
  message: AgentChatMessage | undefined, chunk: AgentChatChunk, runId?: string,
): AgentChatAssistantMessage;
export declare function messagesFromState(agentState: AgentState): ChatMessageInfo[];

export interface ConversationSummary {
  conversationKey: string;
  title: string | null;
  createdAt: number;
  updatedAt: number;
  lastRunId: string | null;
  lastRunStatus: RunState["status"] | null;
  isRequesting: boolean;
}
interface ListOptions { baseUrl?: string; accessToken?: string; fetch?: typeof fetch }
export declare function listConversations(options?: ListOptions & { limit?: number }):
  Promise<{ conversations: ConversationSummary[]; nextCursor: string | null }>;
export declare function listProviders(options?: ListOptions): Promise<Array<{
  name: string; kind: string; transport: string; default: boolean;
  capabilities: Record<string, unknown>;
}>>;
