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

/**
 * The arguments of an editable approval (a server tool's call) as JSON, checked as you type.
 * @param {{ value: string, onChange: (text: string) => void, error: string | null }} props
 */
function JsonEditor({ value, onChange, error }) {
  let parseError = null;
  try { JSON.parse(value); } catch (err) { parseError = /** @type {Error} */ (err).message; }
  return (
    <div className="json-editor">
      <Input.TextArea data-testid="approval-editor" value={value} spellCheck={false}
        status={parseError ? "error" : undefined} autoSize={{ minRows: 3 }}
        style={{ fontFamily: "ui-monospace, monospace" }}
        onChange={(e) => onChange(e.target.value)} />
      {parseError || error
        ? <span className="failure" data-testid="approval-error">{parseError ?? error}</span> : null}
    </div>
  );
}

/** @param {{ approval: ApprovalState, provider: ChatProvider }} props */
function ApprovalButtons({ approval, provider }) {
  const [busy, setBusy] = useState(false);
  const [text, setText] = useState(() => JSON.stringify(approval.data ?? {}, null, 2));
  const [error, setError] = useState(/** @type {string | null} */ (null));
  /** @param {(id: string) => Promise<unknown>} fn */
  const decide = (fn) => async () => {
    setBusy(true);
    try {
      await fn(approval.id);
      setError(null);
    } catch (err) {
      const details = /** @type {{ details?: { errors?: Array<{ path: string, message: string }> } }} */ (err)
        .details?.errors;
      const why = Array.isArray(details)
        ? details.map((d) => `${d.path || "(arguments)"}: ${d.message}`).join("; ") : "";
      setError(why || /** @type {Error} */ (err).message);
    } finally { setBusy(false); }
  };
  // expectedVersion: the decision holds only for the call shown (409 otherwise)
  const edited = () => {
    try { return JSON.parse(text); } catch { return undefined; }
  };
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      {approval.editable ? <JsonEditor value={text} onChange={setText} error={error} /> : null}
      <Space>
        <Button type="primary" size="small" data-testid="approve" loading={busy}
          onClick={decide((id) => provider.approve(id, undefined, approval.version))}>Approve</Button>
        {approval.editable ? (
          <Button size="small" data-testid="approve-modified" disabled={busy || edited() === undefined}
            onClick={decide((id) => provider.approve(id, edited(), approval.version))}>
            Approve with edits
          </Button>
        ) : null}
        <Button danger size="small" data-testid="reject" disabled={busy}
          onClick={decide((id) => provider.reject(id))}>Reject</Button>
      </Space>
      {!approval.editable && error ? <span className="failure">{error}</span> : null}
    </Space>
  );
}

/** @param {ToolCallState | ApprovalState} entity the server (MCP) that runs it, if any */
function serverOf(entity) {
  const meta = /** @type {Record<string, unknown> | undefined} */ (entity.meta);
  return meta?.executor === "gateway" && typeof meta.server === "string" ? meta.server : null;
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
      title: (
        <span data-testid="approval-title">
          Approval · {approval.description ?? approval.id}
          {serverOf(approval) ? <Tag data-testid="approval-server">server {serverOf(approval)}</Tag> : null}
        </span>
      ),
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
      title: (
        <span data-testid="tool-title">
          Tool · {tool.name}
          {serverOf(tool) ? <Tag color="blue" data-testid="tool-server">server {serverOf(tool)}</Tag> : null}
        </span>
      ),
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
