// Type-checked (tsc, strict), never run: the package's declarations as an app uses them, through
// the package's own `exports` (a self-reference by name), with x-sdk 2.9's useXChat.
import { useXChat } from "@ant-design/x-sdk";
import {
  AgentGatewayChatProvider,
  AgentGatewayRequest,
  GatewayRequestError,
  listConversations,
  listProviders,
  messagesFromState,
  type AgentChatAssistantMessage,
  type AgentChatMessage,
} from "@agent-gateway/client/chat-provider";
import {
  applyAgentEvent,
  createGatewayClient,
  createInitialAgentState,
  projectMessages,
  type AgentEvent,
  type AgentState,
} from "@agent-gateway/client";
import { readSSE, type SSEFrame } from "@agent-gateway/client/sse";

export function useGatewayChat(conversationKey: string) {
  const provider = new AgentGatewayChatProvider({ conversationKey, provider: "demo" });
  const chat = useXChat({
    provider,
    conversationKey,
    defaultMessages: () => provider.loadMessages(),
  });
  const first: AgentChatMessage | undefined = chat.messages[0]?.message;
  const assistant = first?.role === "assistant" ? (first satisfies AgentChatAssistantMessage) : undefined;
  const actions = {
    send: (prompt: string) => chat.onRequest({ prompt }),
    stop: () => chat.abort(),
    approve: (id: string) => provider.approve(id),
    reject: (id: string) => provider.reject(id),
    answerTool: (id: string, result: unknown) => provider.submitToolResult(id, result),
    switchProvider: (name: string) => provider.setGatewayProvider(name),
    detach: () => (provider.request as AgentGatewayRequest).detach(),
  };
  return { chat, assistant, actions, runId: provider.runId };
}

export async function lists(): Promise<string[]> {
  const page = await listConversations({ baseUrl: "" });
  const providers = await listProviders({ baseUrl: "" });
  return [...page.conversations.map((c) => c.conversationKey), ...providers.map((p) => p.name)];
}

export function fold(events: AgentEvent[]): AgentState {
  let state = createInitialAgentState();
  for (const event of events) state = applyAgentEvent(state, event).state;
  void projectMessages(state);
  void messagesFromState(state);
  return state;
}

export async function frames(body: ReadableStream<Uint8Array>): Promise<SSEFrame[]> {
  const out: SSEFrame[] = [];
  for await (const frame of readSSE(body)) out.push(frame);
  return out;
}

export const client = createGatewayClient({ baseUrl: "", conversationKey: "c1" });
export const isGatewayError = (err: unknown): err is GatewayRequestError => err instanceof GatewayRequestError;
