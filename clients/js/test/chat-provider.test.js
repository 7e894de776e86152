// AgentGatewayChatProvider under the real useXChat (@ant-design/x-sdk 2.9.0), against a real
// gateway on loopback whose `demo` provider is the upstream.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AgentGatewayChatProvider, listConversations } from "../src/chat-provider.js";
import {
  GATEWAY_URL, NEEDS_GATEWAY, freshKey, getJSON, mountXChat, startProxy, waitFor,
} from "./xchat-support.js";

function setup(name, extra = {}) {
  const conversationKey = freshKey(name);
  const provider = new AgentGatewayChatProvider({
    baseUrl: extra.baseUrl ?? GATEWAY_URL, conversationKey, provider: "demo", ...extra,
  });
  return { conversationKey, provider };
}

async function runsOf(conversationKey) {
  const state = await getJSON(`/v1/conversations/${conversationKey}/state`);
  return Object.values(state.agentState.runs);
}

/** The gateway's own text of the assistant messages of a run (what the hook must show). */
async function gatewayText(conversationKey, runId) {
  const state = await getJSON(`/v1/conversations/${conversationKey}/state`);
  return state.messages
    .map((m) => m.message)
    .filter((m) => m.runId === runId && m.role === "assistant")
    .map((m) => m.content)
    .join("\n\n");
}

const done = (view) => () => view.last?.status === "success" && view.last;
/** The assistant's text has begun (the user's message, last until the run answers, does not count). */
const firstWords = (view) => () => view.last?.message?.role === "assistant" && view.last.message.content.length > 0;


/** The POSTs a dropped request sent (the first and its retries) made one run, resumed:
 * the same Idempotency-Key, a Last-Event-ID on the retry, the message of that run, no issues. */
async function assertResumedOnce(posts, conversationKey, last) {
  assert.ok(posts.length >= 2, `a second POST of the run after the drop (${posts.length})`);
  const keys = posts.map((head) => /^idempotency-key: (.+)$/im.exec(head)?.[1]);
  assert.equal(new Set(keys).size, 1, "the same Idempotency-Key");
  assert.match(posts[1], /^last-event-id: .+$/im);
  const runs = await runsOf(conversationKey);
  assert.equal(runs.length, 1);
  assert.equal(last.message.runId, runs[0].id);
  assert.deepEqual(last.message.state.issues, []);
  return runs;
}

test("text streams into the assistant message, one run, the gateway's exact text", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("text");
  const view = await mountXChat({ provider, conversationKey });
  const updates = [];
  view.chat.onRequest({ prompt: "hello there" });
  await waitFor(() => {
    if (view.last?.status === "updating") updates.push(view.last.message.content);
    return view.last?.status === "success";
  }, "the run to succeed");
  const [user, assistant] = view.chat.messages;
  assert.deepEqual(user.message, { role: "user", content: "hello there" });
  assert.equal(assistant.message.status, "completed");
  assert.match(assistant.message.content, /^You said: hello there\./);
  assert.ok(updates.some((text) => text.length < assistant.message.content.length), "it streamed");
  const runs = await runsOf(conversationKey);
  assert.equal(runs.length, 1);
  assert.equal(assistant.message.runId, runs[0].id);
  assert.equal(assistant.message.content, await gatewayText(conversationKey, runs[0].id));
  assert.equal(view.chat.isRequesting, false);
  const listed = await listConversations({ baseUrl: GATEWAY_URL });
  assert.ok(listed.conversations.some((c) => c.conversationKey === conversationKey));
  view.unmount();
});

test("reasoning is on the message, completed with its summary", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("think");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "think first" });
  const last = await waitFor(done(view), "the run to succeed");
  const [reasoning] = last.message.reasoning;
  assert.equal(reasoning.status, "completed");
  assert.equal(reasoning.content, "Let me work out what is being asked and plan the answer.");
  assert.equal(reasoning.summary, "Planned the answer.");
  view.unmount();
});

test("a tool handed to the app: its result goes back, the same run answers with it", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("tool");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "weather please" });
  const tool = await waitFor(
    () => view.last?.message?.toolCalls?.find((t) => t.status === "running" && t.meta?.executor === "app"),
    "the tool handed to the app",
  );
  assert.equal(tool.name, "get_weather");
  assert.equal(view.chat.isRequesting, true);
  const answer = await provider.submitToolResult(tool.id, { tempC: 21, sky: "clear" });
  assert.equal(answer.command, "tool.submit_result");
  const last = await waitFor(done(view), "the run to succeed");
  assert.equal(last.message.toolCalls[0].status, "completed");
  assert.deepEqual(last.message.toolCalls[0].result, { tempC: 21, sky: "clear" });
  assert.match(last.message.content, /The weather tool answered: \{"tempC": 21, "sky": "clear"\}/);
  assert.equal((await runsOf(conversationKey)).length, 1);
  view.unmount();
});

test("an approval: approve resumes the run, the approved tool runs", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("approve");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "approve the deploy" });
  const approval = await waitFor(
    () => view.last?.message?.approvals?.find((a) => a.status === "waiting"), "the approval",
  );
  assert.equal(approval.risk, "high");
  await provider.approve(approval.id);
  const last = await waitFor(done(view), "the run to succeed");
  assert.equal(last.message.approvals[0].decision, "approved");
  assert.deepEqual(last.message.toolCalls.map((t) => [t.name, t.status]), [["deploy", "completed"]]);
  assert.match(last.message.content, /Deployed as approved\./);
  view.unmount();
});

test("a rejection: the run answers without deploying", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("reject");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "approve the deploy" });
  const approval = await waitFor(
    () => view.last?.message?.approvals?.find((a) => a.status === "waiting"), "the approval",
  );
  await provider.reject(approval.id);
  const last = await waitFor(done(view), "the run to succeed");
  assert.equal(last.message.approvals[0].decision, "rejected");
  assert.deepEqual(last.message.toolCalls, []);
  assert.match(last.message.content, /I will not deploy/);
  view.unmount();
});

test("abort() cancels the run on the gateway: run.cancelled, message status abort", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("abort");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "slow please" });
  await waitFor(firstWords(view), "the first words");
  view.chat.abort();
  const last = await waitFor(() => view.last?.status === "abort" && view.last, "the abort");
  assert.equal(last.message.status, "cancelled");
  assert.equal(last.message.reason, "aborted");
  assert.equal(view.chat.isRequesting, false);
  const run = await getJSON(`/v1/conversations/${conversationKey}/runs/${last.message.runId}`);
  assert.equal(run.status, "cancelled");
  view.unmount();
});

test("detach() closes the stream only: the run goes on and completes server-side", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("detach");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "weather please" });
  const tool = await waitFor(
    () => view.last?.message?.toolCalls?.find((t) => t.status === "running"), "the tool",
  );
  provider.request.detach();
  await waitFor(() => view.last?.status === "abort", "the request to end");
  await provider.submitToolResult(tool.id, { tempC: 3 });
  const run = await getJSON(`/v1/conversations/${conversationKey}/runs/${provider.runId}/wait`);
  assert.equal(run.status, "completed");
  view.unmount();
});

test("a dropped connection mid-answer resumes the same run: no second run, no gap", { skip: NEEDS_GATEWAY }, async () => {
  const proxy = await startProxy(GATEWAY_URL);
  try {
    const { conversationKey, provider } = setup("drop", { baseUrl: proxy.url, retryInterval: 50 });
    const view = await mountXChat({ provider, conversationKey });
    view.chat.onRequest({ prompt: "task and artifact, then text" });
    await waitFor(() => view.last?.message?.tasks?.length > 0, "the first events");
    proxy.dropAll();
    const last = await waitFor(done(view), "the run to succeed after the drop");
    const posts = proxy.requests.filter((head) => head.startsWith("POST /v1/conversations/"));
    const runs = await assertResumedOnce(posts, conversationKey, last);
    assert.equal(last.message.content, await gatewayText(conversationKey, runs[0].id));
    assert.deepEqual(last.message.tasks.map((t) => [t.status, t.progress]), [["completed", 100]]);
    assert.equal(last.message.artifacts[0].status, "completed");
    view.unmount();
  } finally {
    await proxy.close();
  }
});

test("a connection dropped while the text streams resumes it: the same run, no word lost", { skip: NEEDS_GATEWAY }, async () => {
  const proxy = await startProxy(GATEWAY_URL);
  try {
    const { conversationKey, provider } = setup("drop-text", { baseUrl: proxy.url, retryInterval: 50 });
    const view = await mountXChat({ provider, conversationKey });
    view.chat.onRequest({ prompt: "slow please" }); // about 2 minutes of text, word by word
    await waitFor(firstWords(view), "the first words");
    const before = view.last.message.content;
    proxy.dropAll();
    await waitFor(
      () => view.last?.message?.content?.length > before.length + 40, "more words after the drop",
    );
    view.chat.abort(); // enough text seen: end the run rather than wait for all of it
    const last = await waitFor(() => view.last?.status === "abort" && view.last, "the abort");
    const posts = proxy.requests.filter((head) => /^POST \/v1\/conversations\/[^ ]+\/runs\?stream=true /.test(head));
    const runs = await assertResumedOnce(posts, conversationKey, last);
    assert.ok(last.message.content.startsWith(before), "the text before the drop is kept");
    assert.equal(last.message.content, await gatewayText(conversationKey, runs[0].id));
    view.unmount();
  } finally {
    await proxy.close();
  }
});

test("behind a queued run, the message is the request's own run (the stream's X-Run-Id)", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("queued", { multitask: "enqueue" });
  const post = (tail, body) => fetch(`${GATEWAY_URL}/v1/conversations/${conversationKey}/${tail}`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  }).then((r) => r.json());
  const first = await post("runs", { input: { prompt: "weather please" } }); // waits for the app
  const queued = await post("runs", { input: { prompt: "queued one" }, multitask: "enqueue" });
  assert.equal(queued.status, "queued");
  const view = await mountXChat({ provider, conversationKey });
  try {
    view.chat.onRequest({ prompt: "mine" });
    // The stream's answer names the request's run at once, while it is still queued.
    const mine = await waitFor(() => provider.runId, "the request's run to be accepted");
    assert.ok(![first.runId, queued.runId].includes(mine));
    // Let the first run finish: the queued one starts and ends in this stream, then ours.
    const tool = await waitFor(async () => {
      const state = await getJSON(`/v1/conversations/${conversationKey}/state`);
      return Object.values(state.agentState.toolCalls)
        .find((t) => t.runId === first.runId && t.status === "running");
    }, "the first run's tool, handed to the app");
    assert.equal((await post(`tools/${tool.id}/result`, { result: { tempC: 5 } })).command, "tool.submit_result");
    const last = await waitFor(done(view), "the request's run to succeed");
    assert.equal(last.message.runId, mine);
    assert.match(last.message.content, /^You said: mine\./);
    assert.equal(last.message.content, await gatewayText(conversationKey, mine));
    assert.equal((await getJSON(`/v1/conversations/${conversationKey}/runs/${queued.runId}`)).status, "completed");
    assert.equal((await runsOf(conversationKey)).length, 3);
  } finally {
    provider.request.detach(); // a failed assertion leaves no stream open
    view.unmount();
  }
});

test("history comes back: loadMessages as defaultMessages shows the earlier turns", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("history");
  const first = await mountXChat({ provider, conversationKey });
  first.chat.onRequest({ prompt: "remember me" });
  const answered = await waitFor(done(first), "the run to succeed");
  first.unmount();
  const again = new AgentGatewayChatProvider({ baseUrl: GATEWAY_URL, conversationKey });
  const view = await mountXChat({
    provider: again, conversationKey: `${conversationKey}#again`,
    defaultMessages: () => again.loadMessages(),
  });
  await waitFor(() => view.chat.messages.length === 2, "the history");
  const [user, assistant] = view.chat.messages;
  assert.deepEqual(user.message, { role: "user", content: "remember me" });
  assert.equal(assistant.status, "success");
  assert.equal(assistant.message.content, answered.message.content);
  view.unmount();
});

test("setGatewayProvider switches the provider of the next run, not the hook", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("switch");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "one" });
  await waitFor(done(view), "the first run");
  provider.setGatewayProvider("fixed"); // a fixture provider of the test's gateway
  view.chat.onRequest({ prompt: "two" });
  await waitFor(() => view.chat.messages.length === 4 && view.last.status === "success", "the second run");
  assert.match(view.chat.messages[1].message.content, /^You said: one\./);
  assert.equal(view.chat.messages[3].message.content, "Fixture answer.");
  assert.equal((await runsOf(conversationKey)).length, 2);
  view.unmount();
});

test("a gateway refusal reaches onError with its code (unknown provider)", { skip: NEEDS_GATEWAY }, async () => {
  const errors = [];
  const callbacks = { onSuccess() {}, onUpdate() {}, onError: (error) => errors.push(error) };
  const { conversationKey, provider } = setup("refused", { provider: "nope", callbacks });
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "hi" });
  const [error] = await waitFor(() => errors.length && errors, "the refusal");
  assert.equal(error.code, "unknown_provider");
  assert.equal(error.status, 404);
  await waitFor(() => !view.chat.isRequesting, "the hook to stop requesting");
  assert.equal(view.chat.messages.length, 1);
  assert.equal(await getJSON(`/v1/conversations/${conversationKey}/state`), null);
  view.unmount();
});

test("onReload(id, {reload: true}) is the gateway's reload: a new run of the last input", { skip: NEEDS_GATEWAY }, async () => {
  const { conversationKey, provider } = setup("reload");
  const view = await mountXChat({ provider, conversationKey });
  view.chat.onRequest({ prompt: "say it twice" });
  const first = await waitFor(done(view), "the first run");
  const firstRun = first.message.runId;
  view.chat.onReload(first.id, { reload: true });
  await waitFor(() => view.last.message.runId !== firstRun && view.last.status === "success", "the reload");
  assert.equal(view.chat.messages.length, 2); // the reloaded answer replaces the old one
  assert.match(view.last.message.content, /^You said: say it twice\./);
  assert.equal((await runsOf(conversationKey)).length, 2);
  view.unmount();
});
