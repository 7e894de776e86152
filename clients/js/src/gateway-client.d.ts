// Types of gateway-client.js: a useXChat-shaped client for the Agent Event Gateway.
import type {
  AgentProtocolIssue,
  AgentState,
  JsonValue,
  ProjectedMessage,
  RunState,
} from "./agent-reducer.js";

export {
  PROTOCOL_VERSION,
  createInitialAgentState,
  entityKey,
  projectMessages,
  reduceAgentState,
} from "./agent-reducer.js";

export type ConnectionState =
  | "idle" | "connecting" | "open" | "reconnecting" | "resumed" | "closed";

export interface GatewayClientOptions {
  /** Origin and path prefix of the gateway; "" (default) means the page's own origin. */
  baseUrl?: string;
  conversationKey?: string;
  provider?: string | null;
  transport?: "sse" | "ws";
  /** Bearer token; sent as `?access_token=` on the SSE/WS stream, which cannot set headers. */
  accessToken?: string | null;
  reconnectDelayMs?: number;
  fetch?: typeof fetch;
}

/** What `getSnapshot()` returns: stable until the next change (useSyncExternalStore). */
export interface ClientSnapshot {
  messages: ProjectedMessage[];
  agentState: AgentState;
  isRequesting: boolean;
  connection: ConnectionState;
  cursor: string | null;
  issues: AgentProtocolIssue[];
}

export type RunInput = string | { prompt?: string; [key: string]: JsonValue | undefined };

export declare class GatewayError extends Error {
  constructor(status: number, body: unknown);
  status: number;
  code: string;
  details?: unknown;
}

export declare class GatewayClient {
  constructor(options?: GatewayClientOptions);
  baseUrl: string;
  conversationKey: string;
  provider: string | null;
  transport: "sse" | "ws";
  accessToken: string | null;
  connection: ConnectionState;
  lastError: { code: string; message: string } | Record<string, unknown> | null;
  counters: {
    events: number; duplicates: number; invalid: number; snapshots: number; reconnects: number;
  };

  readonly messages: ProjectedMessage[];
  readonly agentState: AgentState;
  readonly isRequesting: boolean;
  readonly cursor: string | null;
  readonly extensions: Record<string, unknown>;
  readonly issues: AgentProtocolIssue[];
  readonly activeRun: RunState | null;
  readonly lastRun: RunState | null;

  subscribe: (listener: (client: GatewayClient) => void) => () => boolean;
  getSnapshot: () => ClientSnapshot;

  onRequest(
    input: RunInput, options?: { provider?: string; multitask?: string }): Promise<unknown>;
  onReload(input?: RunInput, options?: { provider?: string }): Promise<unknown>;
  abort(runId?: string): Promise<unknown>;
  approve(
    approvalId: string, decision?: string, data?: JsonValue, expectedVersion?: string | number,
  ): Promise<unknown>;
  submitToolResult(toolCallId: string, result: JsonValue, isError?: boolean): Promise<unknown>;
  retryTool(toolCallId: string): Promise<unknown>;
  providers(): Promise<Array<{ name: string; kind: string; default?: boolean }>>;

  connect(): void;
  disconnect(): void;
  setConversation(conversationKey: string): void;
  setTransport(transport: "sse" | "ws"): void;
  /** Drop the stream as a network failure would; the client resumes from its cursor. */
  debugKillConnection(): void;
}

export declare function createGatewayClient(options?: GatewayClientOptions): GatewayClient;
