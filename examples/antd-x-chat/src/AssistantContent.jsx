// One assistant message (one gateway run): Think for reasoning, ThoughtChain for tools,
// approvals and tasks (with the app's buttons and the tool-result form), then the text.
import { Think, ThoughtChain } from "@ant-design/x";
import { Alert, Button, Input, Progress, Space, Tag } from "antd";
import React, { useState } from "react";

/**
 * @typedef {import("@agent-gateway/client/chat-provider").AgentGatewayChatProvider} ChatProvider
 * @typedef {import("@agent-gateway/client/chat-provider").AgentChatAssistantMessage} AssistantMessage
 * @typedef {import("@agent-gateway/client/agent-reducer").ApprovalState} ApprovalState
 * @typedef {import("@agent-gateway/client/agent-reducer").ToolCallState} ToolCallState
 * @typedef {import("@ant-design/x").ThoughtChainItemType} ChainItem
 */

/** @type {Record<string, ChainItem["status"]>} */
const CHAIN_STATUS = {
  pending: "loading", running: "loading", streaming: "loading", waiting: "loading",
  completed: "success", failed: "error", cancelled: "abort",
};
/** @type {Record<string, string>} */
const RUN_TAG = { running: "processing", completed: "success", failed: "error", cancelled: "default" };

/** @param {unknown} value */
function pretty(value) {
  if (value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

/** @param {{ tool: ToolCallState, provider: ChatProvider }} props */
function ToolResultForm({ tool, provider }) {
  const [text, setText] = useState('{"tempC": 21, "sky": "clear"}');
  const [error, setError] = useState(/** @type {string | null} */ (null));
  /** @param {boolean} isError */
  const submit = async (isError) => {
    let result;
    try {
      result = isError ? text : JSON.parse(text);
    } catch {
      setError("not JSON");
      return;
    }
    try {
      await provider.submitToolResult(tool.id, result, isError);
      setError(null);
    } catch (err) {
      setError(/** @type {Error} */ (err).message);
    }
  };
  return (
    <div className="tool-form" data-testid="tool-result-form">
      <Input.TextArea data-testid="tool-result" value={text} onChange={(e) => setText(e.target.value)} autoSize />
      <Space direction="vertical">
        <Button type="primary" size="small" data-testid="tool-submit" onClick={() => submit(false)}>Send result</Button>
        <Button size="small" danger onClick={() => submit(true)}>Send as error</Button>
      </Space>
      {error ? <span className="failure">{error}</span> : null}
    </div>
  );
}

/** @param {{ approval: ApprovalState, provider: ChatProvider }} props */
function ApprovalButtons({ approval, provider }) {
  const [busy, setBusy] = useState(false);
  /** @param {(id: string) => Promise<unknown>} fn */
  const decide = (fn) => async () => {
    setBusy(true);
    try { await fn(approval.id); } finally { setBusy(false); }
  };
  return (
    <Space>
      <Button type="primary" size="small" data-testid="approve" loading={busy}
        onClick={decide((id) => provider.approve(id))}>Approve</Button>
      <Button danger size="small" data-testid="reject" disabled={busy}
        onClick={decide((id) => provider.reject(id))}>Reject</Button>
    </Space>
  );
}

/**
 * @param {AssistantMessage} message
 * @param {ChatProvider} provider
 * @returns {ChainItem[]}
 */
function chainItems(message, provider) {
  /** @type {ChainItem[]} */
  const items = [];
  for (const task of message.tasks) {
    items.push({
      key: `task:${task.id}`,
      title: `Task · ${task.title}`,
      status: CHAIN_STATUS[task.status],
      description: <Progress percent={task.progress ?? 0} size="small" />,
    });
  }
  for (const approval of message.approvals) {
    const decided = approval.status === "completed";
    items.push({
      key: `approval:${approval.id}`,
      title: <span data-testid="approval-title">Approval · {approval.description ?? approval.id}</span>,
      status: decided ? (approval.decision === "approved" || approval.decision === "modified" ? "success" : "error") : "loading",
      description: (
        <span>
          risk <Tag color={approval.risk === "high" ? "red" : "gold"}>{approval.risk ?? "n/a"}</Tag>
          {decided ? <Tag data-testid="approval-decision">{approval.decision}</Tag> : null}
        </span>
      ),
      content: approval.data !== undefined ? <pre className="result">{pretty(approval.data)}</pre> : undefined,
      footer: decided ? undefined : <ApprovalButtons approval={approval} provider={provider} />,
    });
  }
  for (const tool of message.toolCalls) {
    const forApp = tool.meta?.executor === "app" && tool.status === "running";
    items.push({
      key: `tool:${tool.id}`,
      title: <span data-testid="tool-title">Tool · {tool.name}</span>,
      status: CHAIN_STATUS[tool.status],
      description: <code>{tool.arguments}</code>,
      content: tool.result !== undefined || tool.error
        ? <pre className="result" data-testid="tool-output">{tool.error ? tool.error.message : pretty(tool.result)}</pre>
        : undefined,
      footer: forApp ? <ToolResultForm tool={tool} provider={provider} /> : undefined,
    });
  }
  return items;
}

/**
 * @param {{
 *   message: (AssistantMessage & { pending?: undefined }) | { pending: true, state?: undefined },
 *   status?: string,
 *   provider: ChatProvider,
 * }} props
 */
export default function AssistantContent({ message, status, provider }) {
  if (!message || message.pending || !message.state) return <span data-testid="assistant-pending">…</span>;
  const items = chainItems(message, provider);
  return (
    <div className="assistant" data-testid="assistant" data-status={status} data-run-status={message.status}
      data-run-id={message.runId}>
      {message.reasoning.map((r) => (
        <Think key={r.id} data-testid="think" title={r.status === "streaming" ? "Thinking…" : (r.summary || "Thought")}
          loading={r.status === "streaming"} defaultExpanded>
          {r.content}
        </Think>
      ))}
      {items.length ? <ThoughtChain items={items} data-testid="thought-chain" /> : null}
      {message.artifacts.map((a) => (
        <Alert key={a.id} type="info" message={`Artifact ${a.name} · v${pretty(a.version)} · ${a.status}`}
          description={<pre className="result">{pretty(a.content)}</pre>} />
      ))}
      <div className="text" data-testid="assistant-text">{message.content}</div>
      {message.error ? (
        <div className="failure" data-testid="run-error">{message.error.message}</div>
      ) : null}
      <div>
        <Tag data-testid="run-status" color={RUN_TAG[message.status]}>{message.status}</Tag>
      </div>
    </div>
  );
}
