// gateway-client.js with a fake EventSource and fetch: snapshot, events, resume, requests.
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { createGatewayClient, entityKey } from "../src/gateway-client.js";
import { eventFactory } from "./support.js";

class FakeEventSource {
  static CLOSED = 2;
  static opened = [];
  static waiters = [];

  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.listeners = {};
    FakeEventSource.opened.push(this);
    for (const resolve of FakeEventSource.waiters.splice(0)) resolve(this);
  }

  static next() {
    return new Promise((resolve) => FakeEventSource.waiters.push(resolve));
  }

  addEventListener(name, fn) { this.listeners[name] = fn; }
  close() { this.readyState = FakeEventSource.CLOSED; }
  open() { this.readyState = 1; this.onopen?.(); }
  snapshot(frame) { this.listeners.snapshot({ data: JSON.stringify(frame) }); }
  event(event, cursor) { this.onmessage({ data: JSON.stringify(event), lastEventId: cursor }); }
}

beforeEach(() => {
  FakeEventSource.opened = [];
  globalThis.EventSource = FakeEventSource;
});
afterEach(() => { delete globalThis.EventSource; });

test("a snapshot, then events folded once each; a dropped stream resumes from the cursor", async () => {
  const client = createGatewayClient({ conversationKey: "c1", fetch: async () => null });
  const seen = [];
  client.subscribe((c) => seen.push(c.connection));
  client.connect();
  const [es] = FakeEventSource.opened;
  assert.equal(es.url, "/v1/conversations/c1/events");
  es.open();
  assert.equal(client.connection, "open");

  const e = eventFactory("s1", "run-1", () => 5);
  const start = e.create("run.started", { input: { prompt: "hi" } });
  es.snapshot({ cursor: "c-0", agentState: null, extensions: { k: 1 } });
  es.event(start, "c-1");
  es.event(e.create("message.started", { messageId: "m", role: "assistant" }), "c-2");
  es.event(e.create("message.delta", { messageId: "m", delta: "hello" }), "c-3");
  es.event(start, "c-1"); // redelivered
  es.event({ type: "message.delta" }, "c-4"); // not an AgentEvent
  assert.deepEqual(client.counters,
    { events: 3, duplicates: 1, invalid: 1, snapshots: 1, reconnects: 0 });
  assert.equal(client.cursor, "c-4");
  assert.deepEqual(client.extensions, { k: 1 });
  assert.equal(client.isRequesting, true);
  assert.deepEqual(client.messages.map((m) => [m.id, m.status, m.message.content]),
    [[entityKey("run-1", "m"), "updating", "hello"]]);
  const before = client.getSnapshot();
  assert.equal(client.getSnapshot(), before); // stable until something changes

  const reopened = FakeEventSource.next();
  client.debugKillConnection();
  assert.equal(es.readyState, FakeEventSource.CLOSED);
  const es2 = await reopened;
  assert.equal(es2.url, "/v1/conversations/c1/events?since=c-4");
  es2.open();
  assert.equal(client.connection, "resumed");
  es2.event(e.create("run.completed", {}), "c-5");
  assert.equal(client.isRequesting, false);
  assert.notEqual(client.getSnapshot(), before);
  assert.deepEqual(seen.filter((s, i) => s !== seen[i - 1]),
    ["connecting", "open", "reconnecting", "resumed"]);
  client.disconnect();
  assert.equal(es2.readyState, FakeEventSource.CLOSED);
});

test("requests: body, provider, bearer token, and errors as GatewayError", async () => {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    if (url.endsWith("/abort")) {
      return new Response(JSON.stringify({ error: { code: "no_run", message: "nothing" } }),
        { status: 404 });
    }
    return new Response(JSON.stringify({ runId: "run-1" }), { status: 202 });
  };
  const client = createGatewayClient({
    conversationKey: "a b", provider: "demo", accessToken: "tok", fetch });
  const pending = client.onRequest("hi");
  assert.equal(client.isRequesting, true);
  assert.deepEqual(await pending, { runId: "run-1" });
  assert.equal(client.isRequesting, false);
  assert.equal(calls[0].url, "/v1/conversations/a%20b/runs");
  assert.equal(calls[0].init.headers.authorization, "Bearer tok");
  assert.deepEqual(JSON.parse(calls[0].init.body), { input: { prompt: "hi" }, provider: "demo" });

  await client.approve("ap/1", "rejected", { why: "no" });
  assert.equal(calls[1].url, "/v1/conversations/a%20b/approvals/ap%2F1");
  assert.deepEqual(JSON.parse(calls[1].init.body), { decision: "rejected", data: { why: "no" } });

  await assert.rejects(client.abort(), { name: "Error", status: 404, code: "no_run" });
  assert.deepEqual(client.lastError, { code: "no_run", message: "nothing" });

  client.connect();
  assert.equal(FakeEventSource.opened[0].url, "/v1/conversations/a%20b/events?access_token=tok");
  client.disconnect();
});
