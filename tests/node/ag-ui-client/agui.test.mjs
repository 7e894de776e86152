// @ag-ui/client's HttpAgent against a real gateway (POST /v1/ag-ui/agent), in front of the
// scripted AG-UI agent of tests/app/support/agui_upstream.py. Run by tests/app/agui/test_endpoint_node.py
// with GATEWAY_URL and AGENT_STATS_URL set. Every stream passes through the client's own event
// verifier (runAgent rejects on a protocol violation).
import { test } from "node:test";
import assert from "node:assert/strict";
import { HttpAgent } from "@ag-ui/client";

const gateway = process.env.GATEWAY_URL;
const stats = process.env.AGENT_STATS_URL;
if (!gateway || !stats) throw new Error("GATEWAY_URL and AGENT_STATS_URL are required");

const weather = {
  name: "get_weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } } },
};

function agentFor(threadId) {
  return new HttpAgent({ url: `${gateway}/v1/ag-ui/agent`, threadId });
}

function lastAssistantText(agent) {
  const messages = agent.messages.filter((m) => m.role === "assistant" && m.content);
  return messages.at(-1)?.content;
}

async function state(threadId) {
  const response = await fetch(`${gateway}/v1/conversations/${threadId}/state`);
  assert.equal(response.status, 200);
  return response.json();
}

async function until(what, check, within = 10_000) {
  const deadline = Date.now() + within;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

test("a text answer", async () => {
  const agent = agentFor("node-text");
  agent.addMessage({ id: "u1", role: "user", content: "hello" });
  await agent.runAgent();
  assert.equal(lastAssistantText(agent), "Hello from the gateway!");
  assert.equal(agent.messages.filter((m) => m.role === "user").length, 1, "user message echoed");
});

test("a frontend tool round trip in two requests is one gateway run", async () => {
  const agent = agentFor("node-tool");
  agent.addMessage({ id: "u1", role: "user", content: "weather in Paris?" });
  await agent.runAgent({ tools: [weather] });
  const call = agent.messages.at(-1).toolCalls?.[0];
  assert.ok(call, "the assistant message carries the tool call");
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });

  agent.addMessage({ id: "t1", role: "tool", toolCallId: call.id, content: "sunny" });
  await agent.runAgent({ tools: [weather] });
  assert.equal(lastAssistantText(agent), "It is sunny in Paris.");

  const snapshot = await state("node-tool");
  const runs = Object.values(snapshot.agentState.runs);
  assert.equal(runs.length, 1);
  assert.equal(runs[0].status, "completed");
  const tools = Object.values(snapshot.agentState.toolCalls);
  assert.equal(tools[0].result, "sunny");
});

test("an approval goes out as an interrupt and comes back through resume", async () => {
  const agent = agentFor("node-approve");
  agent.addMessage({ id: "u1", role: "user", content: "approve the plan" });
  await agent.runAgent();
  assert.equal(agent.pendingInterrupts.length, 1);
  const [interrupt] = agent.pendingInterrupts;
  assert.equal(interrupt.message, "Go ahead?");

  await agent.runAgent({
    resume: [{ interruptId: interrupt.id, status: "resolved", payload: { decision: "approved" } }],
  });
  assert.equal(lastAssistantText(agent), "Decision: approved.");
  assert.equal(agent.pendingInterrupts.length, 0);
  const runs = Object.values((await state("node-approve")).agentState.runs);
  assert.deepEqual(
    runs.map((run) => run.status),
    ["completed"],
  );
});

test("abortRun() mid-stream cancels the gateway run and closes the upstream", async () => {
  const before = (await (await fetch(stats)).json()).disconnects;
  const agent = agentFor("node-abort");
  agent.addMessage({ id: "u1", role: "user", content: "slow" });
  let deltas = 0;
  const run = agent.runAgent(
    {},
    {
      onTextMessageContentEvent() {
        deltas += 1;
        if (deltas === 3) agent.abortRun();
      },
    },
  );
  await run.catch(() => undefined); // an aborted fetch ends the run quietly
  assert.ok(deltas >= 3);
  await until("the gateway run to end run.cancelled", async () => {
    const runs = Object.values((await state("node-abort")).agentState.runs);
    return runs.length === 1 && runs[0].status === "cancelled";
  });
  await until("the upstream to see its connection closed", async () => {
    const now = (await (await fetch(stats)).json()).disconnects;
    return now > before;
  });
});

test("every event kind passes the client's verifier", async () => {
  const agent = agentFor("node-everything");
  agent.addMessage({ id: "u1", role: "user", content: "everything" });
  const seen = new Set();
  const subscriber = { onEvent: ({ event }) => void seen.add(event.type) };
  await agent.runAgent({}, subscriber);
  for (const kind of [
    "REASONING_MESSAGE_CONTENT",
    "STEP_STARTED",
    "STEP_FINISHED",
    "STATE_SNAPSHOT",
    "ACTIVITY_SNAPSHOT",
    "CUSTOM",
    "TOOL_CALL_RESULT",
    "TEXT_MESSAGE_CONTENT",
  ]) {
    assert.ok(seen.has(kind), kind);
  }
  assert.deepEqual(agent.state, { count: 2 });
  assert.equal(agent.pendingInterrupts.length, 1);
  const [interrupt] = agent.pendingInterrupts;
  await agent.runAgent({ resume: [{ interruptId: interrupt.id, status: "cancelled" }] });
  assert.equal(lastAssistantText(agent), "Decision: rejected."); // a cancelled resume = rejected
  const approvals = Object.values((await state("node-everything")).agentState.approvals);
  assert.equal(approvals[0].decision, "rejected");
});

test("a failed run and a run cancelled elsewhere end RUN_ERROR through the verifier", async () => {
  const failing = agentFor("node-fail");
  failing.addMessage({ id: "u1", role: "user", content: "fail" });
  const failures = [];
  await failing.runAgent({}, { onRunErrorEvent: ({ event }) => void failures.push(event.code) });
  assert.deepEqual(failures, ["upstream_error"]);

  const slow = agentFor("node-cancel");
  slow.addMessage({ id: "u1", role: "user", content: "slow" });
  const cancels = [];
  let aborted;
  const run = slow.runAgent(
    {},
    {
      onTextMessageContentEvent() {
        aborted ??= fetch(`${gateway}/v1/conversations/node-cancel/abort`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}",
        });
      },
      onRunErrorEvent: ({ event }) => void cancels.push(event.code),
    },
  );
  await run; // resolves only if every event passed the verifier
  assert.equal((await aborted).status, 202);
  assert.deepEqual(cancels, ["cancelled"]);
  const runs = Object.values((await state("node-cancel")).agentState.runs);
  assert.deepEqual(
    runs.map((r) => r.status),
    ["cancelled"],
  );
});
