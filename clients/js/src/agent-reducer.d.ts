// Types of agent-reducer.js: Agent Event protocol 0.1 (protocol.md §1–4, §8).

export declare const PROTOCOL_VERSION: "0.1";

export type AgentEventType =
  | "session.started"
  | "run.started" | "run.completed" | "run.failed" | "run.cancelled"
  | "message.started" | "message.delta" | "message.completed" | "message.failed"
  | "message.cancelled"
  | "reasoning.started" | "reasoning.delta" | "reasoning.completed" | "reasoning.failed"
  | "reasoning.cancelled"
  | "tool.requested" | "tool.arguments_delta" | "tool.running" | "tool.completed"
  | "tool.failed" | "tool.cancelled"
  | "approval.requested" | "approval.resolved"
  | "task.created" | "task.updated" | "task.completed" | "task.failed" | "task.cancelled"
  | "artifact.created" | "artifact.updated" | "artifact.completed" | "artifact.failed";

export declare const EVENT_TYPES: readonly AgentEventType[];
export type ApprovalDecision = "approved" | "rejected" | "modified" | "expired";
export declare const APPROVAL_DECISIONS: readonly ApprovalDecision[];
export type TerminalStatus = "completed" | "failed" | "cancelled";
export declare const TERMINAL_STATUSES: readonly TerminalStatus[];

export type EntityKind = "message" | "reasoning" | "tool" | "approval" | "task" | "artifact";
export type EntityMapName =
  | "messages" | "reasoning" | "toolCalls" | "approvals" | "tasks" | "artifacts";
export declare const ENTITY_MAPS: Readonly<Record<EntityKind, EntityMapName>>;

export type JsonValue =
  | null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export interface ContentPart {
  type: string;
  text?: string;
  url?: string;
  mediaType?: string;
  name?: string;
  data?: JsonValue;
  [key: string]: unknown;
}
export type MessageContent = string | ContentPart[];

export interface AgentError {
  message: string;
  code?: string;
  retryable?: boolean;
  [key: string]: unknown;
}

/** A wire-form AgentEvent (camelCase); `payload` fields depend on `type` (protocol.md §2). */
export interface AgentEvent {
  protocolVersion: "0.1";
  type: AgentEventType;
  eventId: string;
  sessionId: string;
  runId: string;
  sequence: number;
  timestamp: number;
  parentId?: string;
  meta?: Record<string, unknown>;
  payload: Record<string, unknown>;
}

export interface ValidationProblem {
  /** JSON path of the offending value, e.g. `$.payload.messageId`. */
  path: string;
  reason: string;
}

export type IssueCode =
  | "duplicate_entity" | "invalid_sequence" | "invalid_transition" | "missing_entity"
  | "missing_run";

export interface AgentProtocolIssue {
  code: IssueCode;
  eventId: string;
  runId: string;
  message: string;
}

export interface SessionState { id: string; title?: string; createdAt: number }

export interface RunState {
  id: string;
  sessionId: string;
  status: "running" | TerminalStatus;
  input?: JsonValue;
  output?: JsonValue;
  usage?: Record<string, number>;
  error?: AgentError;
  reason?: string;
  createdAt: number;
  updatedAt: number;
}

interface EntityBase<S extends string> {
  id: string;
  runId: string;
  parentId?: string;
  meta?: Record<string, unknown>;
  status: S;
  error?: AgentError;
  reason?: string;
  createdAt: number;
  updatedAt: number;
}

export interface MessageState extends EntityBase<"streaming" | TerminalStatus> {
  role: string;
  content: MessageContent;
}
export interface ReasoningState extends EntityBase<"streaming" | TerminalStatus> {
  content: string;
  redacted: boolean;
  summary?: string;
}
export interface ToolCallState extends EntityBase<"pending" | "running" | TerminalStatus> {
  name: string;
  arguments: string;
  attempt: number;
  index?: number;
  retryOf?: string;
  result?: JsonValue;
}
export interface ApprovalState extends EntityBase<"waiting" | "completed"> {
  toolCallId?: string;
  description?: string;
  risk?: string;
  data?: JsonValue;
  editable?: boolean;
  expiresAt?: number;
  version?: string | number;
  decision?: ApprovalDecision;
}
export interface TaskState extends EntityBase<"pending" | "running" | TerminalStatus> {
  title: string;
  description?: string;
  progress?: number;
  result?: JsonValue;
}
export interface ArtifactState extends EntityBase<"streaming" | TerminalStatus> {
  name: string;
  mediaType?: string;
  content?: JsonValue;
  version?: JsonValue;
}

export interface OrderRef { kind: EntityKind; id: string; runId: string }

/** The AgentState (protocol.md §3); entity maps are keyed by `entityKey(runId, id)`. */
export interface AgentState {
  sessions: Record<string, SessionState>;
  runs: Record<string, RunState>;
  messages: Record<string, MessageState>;
  reasoning: Record<string, ReasoningState>;
  toolCalls: Record<string, ToolCallState>;
  approvals: Record<string, ApprovalState>;
  tasks: Record<string, TaskState>;
  artifacts: Record<string, ArtifactState>;
  order: OrderRef[];
  issues: AgentProtocolIssue[];
  processedEventIds: Record<string, true>;
  lastSequenceByRun: Record<string, number>;
}

export type ApplyOutcome = "invalid" | "duplicate" | "accepted" | AgentProtocolIssue;

export type MessageStatus = "error" | "abort" | "local" | "success" | "updating";
export interface ProjectedMessage { id: string; message: MessageState; status: MessageStatus }

export declare function entityKey(runId: string, id: string): string;
export declare function eventKey(runId: string, eventId: string): string;
export declare function validateEvent(data: unknown): ValidationProblem | null;
export declare function isAgentEvent(data: unknown): data is AgentEvent;
export declare function createInitialAgentState(): AgentState;
export declare function appendContent(
  content: MessageContent, delta: MessageContent): MessageContent;
export declare function reduceAgentState(state: AgentState, event: unknown): AgentState;
export declare function applyAgentEvent(
  state: AgentState, event: unknown): { state: AgentState; outcome: ApplyOutcome };
export declare function messageStatus(message: MessageState): MessageStatus;
export declare function projectMessages(state: AgentState): ProjectedMessage[];
export declare function isRequesting(state: AgentState): boolean;
