// A chat on the Agent Event Gateway with Ant Design X: useXChat({ provider }) where the
// provider is @agent-gateway/client's AgentGatewayChatProvider, one per conversation.
import { Bubble, Conversations, Sender } from "@ant-design/x";
import { useXChat } from "@ant-design/x-sdk";
import { AgentGatewayChatProvider, listConversations, listProviders } from "@agent-gateway/client/chat-provider";
import { Button, Select, Tag } from "antd";
import React, { useCallback, useEffect, useMemo, useState } from "react";

import AssistantContent from "./AssistantContent.jsx";

/**
 * @typedef {import("@agent-gateway/client/chat-provider").AgentChatAssistantMessage} AgentChatAssistantMessage
 * @typedef {import("@agent-gateway/client/chat-provider").ConversationSummary} ConversationSummary
 * @typedef {Awaited<ReturnType<typeof listProviders>>[number]} GatewayProvider
 * @typedef {NonNullable<import("@ant-design/x").BubbleListProps["role"]>} Roles
 */

const KEY_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
/** @type {Map<string, AgentGatewayChatProvider>} */
const chatProviders = new Map(); // conversationKey -> provider (useXChat keeps one per key)

/**
 * @param {string} conversationKey
 * @param {string} gatewayProvider
 */
function providerFor(conversationKey, gatewayProvider) {
  let provider = chatProviders.get(conversationKey);
  if (!provider) {
    provider = new AgentGatewayChatProvider({ conversationKey, provider: gatewayProvider || undefined });
    chatProviders.set(conversationKey, provider);
  }
  return provider;
}

function newKey() {
  return `chat-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}

/** The conversation in the URL (`?c=`), so a reload shows the same conversation. */
function keyFromUrl() {
  const key = new URLSearchParams(window.location.search).get("c");
  return key && KEY_PATTERN.test(key) ? key : newKey();
}

/** @returns {[string, (key: string) => void]} */
function useConversationKey() {
  const [key, setKey] = useState(keyFromUrl);
  useEffect(() => {
    const url = new URL(window.location.href);
    if (url.searchParams.get("c") !== key) {
      url.searchParams.set("c", key);
      window.history.replaceState(null, "", url);
    }
  }, [key]);
  return [key, setKey];
}

export default function App() {
  const [conversationKey, setConversationKey] = useConversationKey();
  const [gatewayProviders, setGatewayProviders] = useState(/** @type {GatewayProvider[]} */ ([]));
  const [gatewayProvider, setGatewayProvider] = useState(
    () => new URLSearchParams(window.location.search).get("provider") ?? "",
  );
  const [conversations, setConversations] = useState(/** @type {ConversationSummary[]} */ ([]));
  const [value, setValue] = useState("");

  const provider = providerFor(conversationKey, gatewayProvider);
  // The provider select changes what the next run uses; the hook and its messages stay.
  useEffect(() => {
    for (const item of chatProviders.values()) item.setGatewayProvider(gatewayProvider || null);
  }, [gatewayProvider, provider]);

  const { messages, onRequest, abort, isRequesting } = useXChat({
    provider,
    conversationKey,
    defaultMessages: () => provider.loadMessages(),
    // Not a run's message yet: AssistantContent shows it as pending.
    requestPlaceholder: /** @type {AgentChatAssistantMessage} */ (
      /** @type {unknown} */ ({ role: "assistant", content: "", pending: true })
    ),
  });

  const refreshConversations = useCallback(() => {
    listConversations().then((page) => setConversations(page.conversations), () => {});
  }, []);
  useEffect(() => {
    listProviders().then((list) => {
      setGatewayProviders(list);
      setGatewayProvider((current) => current || (list.find((p) => p.default) ?? list[0])?.name || "");
    }, () => {});
  }, []);
  useEffect(refreshConversations, [refreshConversations, isRequesting, conversationKey]);

  const items = useMemo(() => {
    const listed = conversations.map((c) => ({
      key: c.conversationKey,
      label: c.title || c.conversationKey,
      "data-testid": `conversation-${c.conversationKey}`,
    }));
    if (!listed.some((c) => c.key === conversationKey)) {
      listed.unshift({ key: conversationKey, label: `${conversationKey} (new)`, "data-testid": `conversation-${conversationKey}` });
    }
    return listed;
  }, [conversations, conversationKey]);

  const bubbles = messages.map(({ id, message, status }) => ({
    key: id,
    role: message.role === "user" ? "user" : "ai",
    content: message,
    status,
    loading: status === "loading",
  }));

  const roles = useMemo(/** @returns {Roles} */ () => ({
    user: { placement: "end", contentRender: (content) => <span data-testid="user-text">{content.content}</span> },
    ai: {
      placement: "start",
      variant: "outlined",
      contentRender: (content, info) => (
        <AssistantContent message={content} status={info.status} provider={provider} />
      ),
    },
  }), [provider]);

  return (
    <div className="layout">
      <aside className="sidebar">
        <h1>Agent Event Gateway</h1>
        <Button className="new-chat" data-testid="new-chat" onClick={() => setConversationKey(newKey())}>
          New chat
        </Button>
        <div className="list" data-testid="conversations">
          <Conversations
            items={items}
            activeKey={conversationKey}
            onActiveChange={(key) => setConversationKey(key)}
          />
        </div>
      </aside>
      <main className="chat">
        <div className="toolbar">
          <span className="key" data-testid="conversation-key">{conversationKey}</span>
          <span className="spacer" />
          {isRequesting ? <Tag color="processing">running</Tag> : null}
          <span>Provider</span>
          <Select
            data-testid="provider-select"
            style={{ minWidth: 160 }}
            value={gatewayProvider || undefined}
            onChange={setGatewayProvider}
            options={gatewayProviders.map((p) => ({ value: p.name, label: `${p.name} (${p.kind})` }))}
          />
        </div>
        <div className="messages" data-testid="messages">
          <Bubble.List items={bubbles} role={roles} style={{ height: "100%" }} />
        </div>
        <div className="composer">
          <Sender
            value={value}
            onChange={setValue}
            loading={isRequesting}
            placeholder="Ask something: think, search, weather, approve, task, artifact, slow, fail, all"
            onSubmit={(text) => {
              if (!text.trim()) return;
              onRequest({ prompt: text });
              setValue("");
            }}
            onCancel={() => abort()}
          />
        </div>
      </main>
    </div>
  );
}
