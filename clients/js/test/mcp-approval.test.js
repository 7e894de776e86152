// A server tool (MCP) under the real useXChat: the gateway's model calls `tools__echo` of an
// MCP server, the approval card's data is the exact call, and the provider approves it with
// edited arguments bound to the approval's version; the same run answers with the tool's result.
// Run by tests/clients/js/test_chat_provider_mcp.py, which starts the MCP server, the model's
// mock upstream and the gateway (provider "chat").
import assert from "node:assert/strict";
import { test } from "node:test";

import { AgentGatewayChatProvider } from "../src/chat-provider.js";
import { GATEWAY_URL, NEEDS_GATEWAY, freshKey, getJSON, mountXChat, waitFor } from "./xchat-support.js";

test("approve a server tool with edits: the edited call runs, the run answers", { skip: NEEDS_GATEWAY }, async () => {
  const conversationKey = freshKey("mcp");
  const provider = new AgentGatewayChatProvider({ baseUrl: GATEWAY_URL, conversationKey, provider: "chat" });
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "echo hi" });
  const approval = await waitFor(
    () => view.last?.message?.approvals?.find((a) => a.status === "waiting"),
    "the server tool's approval",
  );
  const tool = view.last.message.toolCalls.find((t) => t.id === approval.toolCallId);
  assert.equal(tool.name, "tools__echo");
  assert.deepEqual(tool.meta && { executor: tool.meta.executor, server: tool.meta.server },
    { executor: "gateway", server: "tools" });
  assert.deepEqual(approval.data, { text: "hi" });
  assert.equal(approval.editable, true);
  assert.equal(typeof approval.version, "string");

  const stale = await provider.approve(approval.id, { text: "x" }, "not-the-version").then(
    () => null, (error) => error);
  assert.equal(stale?.status, 409);

  const answer = await provider.approve(approval.id, { text: "edited", times: 2 }, approval.version);
  assert.equal(answer.command, "approval.resolve");
  const last = await waitFor(() => view.last?.status === "success" && view.last, "the run to succeed");
  const done = last.message.toolCalls.find((t) => t.id === approval.toolCallId);
  assert.equal(done.status, "completed");
  assert.equal(done.result, "edited edited");
  assert.equal(last.message.approvals[0].decision, "modified");
  assert.match(last.message.content, /edited edited/);
  const state = await getJSON(`/v1/conversations/${conversationKey}/state`);
  assert.equal(Object.values(state.agentState.runs).length, 1);
  view.unmount();
});
