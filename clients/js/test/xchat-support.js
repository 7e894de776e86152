// Helpers for the provider's tests: the real useXChat mounted in a test renderer, a TCP proxy
// that can drop every connection, and a condition wait.
import net from "node:net";

import { useXChat } from "@ant-design/x-sdk";
import React from "react";
import TestRenderer, { act } from "react-test-renderer";

/** The gateway under test (started by tests/clients/js/test_chat_provider.py). */
export const GATEWAY_URL = process.env.AGENT_GATEWAY_URL ?? "";
export const NEEDS_GATEWAY = GATEWAY_URL ? false : "needs AGENT_GATEWAY_URL (a running gateway)";

/** Resolves once `predicate()` (or the promise it returns) is truthy (checked every 10 ms), rejects after `timeoutMs`. */
export async function waitFor(predicate, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Mounts `useXChat(config)`; `.chat` is the hook's latest return value. */
export async function mountXChat(config) {
  const box = { current: null };
  function Probe() {
    box.current = useXChat(config);
    return null;
  }
  let renderer;
  await act(async () => { renderer = TestRenderer.create(React.createElement(Probe)); });
  return {
    get chat() { return box.current; },
    /** The last message of the hook (the assistant's, once the run streams). */
    get last() { const list = box.current.messages; return list[list.length - 1]; },
    unmount() { renderer.unmount(); },
  };
}

/** A unique conversation key per test. */
export function freshKey(name) {
  return `${name}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** GET a gateway JSON route (null for 404). */
export async function getJSON(path) {
  const r = await fetch(`${GATEWAY_URL}${path}`);
  if (r.status === 404) return null;
  if (!r.ok) throw new Error(`GET ${path}: HTTP ${r.status}`);
  return r.json();
}

/** A loopback TCP proxy to `target`; `dropAll()` cuts every open connection, as a network would. */
export async function startProxy(target) {
  const { hostname, port } = new URL(target);
  const sockets = new Set();
  const requests = [];
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    sockets.add(client);
    sockets.add(upstream);
    client.on("data", (chunk) => {
      const text = chunk.toString("latin1");
      if (/^(GET|POST|PUT|PATCH|DELETE) /.test(text)) requests.push(text.split("\r\n\r\n")[0]);
    });
    client.pipe(upstream);
    upstream.pipe(client);
    const close = () => { client.destroy(); upstream.destroy(); sockets.delete(client); sockets.delete(upstream); };
    client.on("error", close);
    upstream.on("error", close);
    client.on("close", close);
    upstream.on("close", close);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    /** Request heads (request line and headers) in arrival order. */
    requests,
    dropAll() { for (const socket of sockets) socket.destroy(); sockets.clear(); },
    close() { this.dropAll(); return new Promise((resolve) => server.close(resolve)); },
  };
}
