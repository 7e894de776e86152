// gateway-client.js — a small ES module client for the Agent Event Gateway (protocol 0.1).
//
// No dependencies, no build step; it imports the reducer from ./agent-reducer.js beside it.
//
//   import { createGatewayClient } from "./gateway-client.js";
//   const chat = createGatewayClient({ conversationKey: "c1", provider: "demo" });
//   chat.subscribe(() => render(chat.messages, chat.agentState, chat.isRequesting));
//   chat.connect();                       // SSE (EventSource) by default, or transport: "ws"
//   await chat.onRequest({ prompt: "hi" });
//   await chat.abort();  await chat.onReload();
//
// The shape follows useXChat's return value: messages, agentState, onRequest, abort, onReload,
// isRequesting. The client keeps a local AgentState: the last snapshot frame, then every event
// folded with the protocol's reducer (agent-reducer.js, protocol.md §4), and projects `messages`
// (protocol.md §8). On reconnect it resumes from the last cursor (Last-Event-ID, or ?since=),
// so no event is lost or applied twice.

import {
  applyAgentEvent,
  createInitialAgentState,
  isRequesting,
  projectMessages,
} from "./agent-reducer.js";

export {
  PROTOCOL_VERSION,
  createInitialAgentState,
  entityKey,
  projectMessages,
  reduceAgentState,
} from "./agent-reducer.js";

/**
 * @typedef {import("./gateway-client.js").ClientSnapshot} ClientSnapshot
 * @typedef {import("./gateway-client.js").ConnectionState} ConnectionState
 * @typedef {import("./gateway-client.js").GatewayClientOptions} GatewayClientOptions
 * @typedef {import("./gateway-client.js").RunInput} RunInput
 * @typedef {import("./agent-reducer.js").AgentEvent} AgentEvent
 * @typedef {import("./agent-reducer.js").AgentState} AgentState
 * @typedef {import("./agent-reducer.js").JsonValue} JsonValue
 * @typedef {import("./agent-reducer.js").ProjectedMessage} ProjectedMessage
 */

// ---------------------------------------------------------------------------------------------
// Client

export class GatewayError extends Error {
  /**
   * @param {number} status
   * @param {any} body the answer's JSON (an error document, or anything else)
   */
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "http_error";
    this.details = err.details;
  }
}

// connection: "idle" | "connecting" | "open" | "reconnecting" | "resumed" | "closed"
export class GatewayClient {
  /** @param {GatewayClientOptions} [options] */
  constructor(options = {}) {
    this.baseUrl = (options.baseUrl ?? "").replace(/\/$/, "");
    this.conversationKey = options.conversationKey ?? "default";
    this.provider = options.provider ?? null;
    this.transport = options.transport ?? "sse";
    this.accessToken = options.accessToken ?? null;
    this.reconnectDelayMs = options.reconnectDelayMs ?? 500;
    /** @type {typeof fetch} */
    this._fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    /** @type {Set<(client: GatewayClient) => void>} */
    this._listeners = new Set();
    /** @type {ClientSnapshot | null} */
    this._snapshot = null;
    /** @type {AgentState} */
    this._state = createInitialAgentState();
    /** @type {ProjectedMessage[]} */
    this._messages = [];
    /** @type {Record<string, unknown>} */
    this._extensions = {};
    /** @type {string | null} */
    this._cursor = null;
    this._pending = 0;
    /** @type {EventSource | null} */
    this._source = null;
    /** @type {WebSocket | null} */
    this._socket = null;
    /** @type {ReturnType<typeof setTimeout> | null} */
    this._timer = null;
    this._wantOpen = false;
    this._hadConnection = false;
    /** @type {ConnectionState} */
    this.connection = "idle";
    /** @type {{ code: string, message: string } | Record<string, unknown> | null} */
    this.lastError = null;
    this.counters = { events: 0, duplicates: 0, invalid: 0, snapshots: 0, reconnects: 0 };
  }

  // -- useXChat-shaped surface ----------------------------------------------------------------
  get messages() { return this._messages; }
  get agentState() { return this._state; }
  get isRequesting() { return this._pending > 0 || isRequesting(this._state); }
  get cursor() { return this._cursor; }
  get extensions() { return this._extensions; }
  get issues() { return this._state.issues; }
  get activeRun() {
    const running = Object.values(this._state.runs).filter((r) => r.status === "running");
    return running.length ? running[running.length - 1] : null;
  }
  get lastRun() {
    const runs = Object.values(this._state.runs);
    return runs.length ? runs.reduce((a, b) => (b.createdAt >= a.createdAt ? b : a)) : null;
  }

  // subscribe/getSnapshot follow React's useSyncExternalStore contract:
  //   const chat = useSyncExternalStore(client.subscribe, client.getSnapshot);
  /** @param {(client: GatewayClient) => void} listener */
  subscribe = (listener) => {
    this._listeners.add(listener);
    return () => this._listeners.delete(listener);
  };

  /** @returns {ClientSnapshot} */
  getSnapshot = () => {
    if (!this._snapshot) {
      this._snapshot = {
        messages: this._messages, agentState: this._state, isRequesting: this.isRequesting,
        connection: this.connection, cursor: this._cursor, issues: this._state.issues,
      };
    }
    return this._snapshot;
  };

  /**
   * @param {RunInput} input
   * @param {{ provider?: string, multitask?: string }} [options]
   */
  onRequest(input, { provider, multitask } = {}) {
    /** @type {Record<string, unknown>} */
    const body = { input: typeof input === "string" ? { prompt: input } : input };
    const name = provider ?? this.provider;
    if (name) body.provider = name;
    if (multitask) body.multitask = multitask;
    return this._tracked(this._post("runs", body));
  }

  /**
   * @param {RunInput} [input]
   * @param {{ provider?: string }} [options]
   */
  onReload(input, { provider } = {}) {
    /** @type {Record<string, unknown>} */
    const body = {};
    if (input !== undefined) body.input = typeof input === "string" ? { prompt: input } : input;
    const name = provider ?? this.provider;
    if (name) body.provider = name;
    return this._tracked(this._post("reload", body));
  }

  /** @param {string} [runId] */
  abort(runId) {
    return this._post("abort", runId ? { runId } : {});
  }

  /**
   * @param {string} approvalId
   * @param {string} [decision]
   * @param {JsonValue} [data]
   * @param {string | number} [expectedVersion]
   */
  approve(approvalId, decision = "approved", data, expectedVersion) {
    /** @type {Record<string, unknown>} */
    const body = { decision };
    if (data !== undefined) body.data = data;
    if (expectedVersion !== undefined) body.expectedVersion = expectedVersion;
    return this._post(`approvals/${encodeURIComponent(approvalId)}`, body);
  }

  /**
   * @param {string} toolCallId
   * @param {JsonValue} result
   * @param {boolean} [isError]
   */
  submitToolResult(toolCallId, result, isError = false) {
    /** @type {Record<string, unknown>} */
    const body = { result };
    if (isError) body.isError = true;
    return this._post(`tools/${encodeURIComponent(toolCallId)}/result`, body);
  }

  /** @param {string} toolCallId */
  retryTool(toolCallId) {
    return this._post(`tools/${encodeURIComponent(toolCallId)}/retry`, {});
  }

  async providers() {
    const r = await this._fetch(this._url("/v1/providers"), { headers: this._headers() });
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new GatewayError(r.status, body);
    return body.providers;
  }

  // -- stream ---------------------------------------------------------------------------------

  connect() {
    this._wantOpen = true;
    this._open(this._cursor);
  }

  disconnect() {
    this._wantOpen = false;
    this._closeStream();
    this._setConnection("closed");
  }

  // Switch conversation: drop local state, reconnect without a resume point (fresh snapshot).
  /** @param {string} conversationKey */
  setConversation(conversationKey) {
    const wasOpen = this._wantOpen;
    this.disconnect();
    this.conversationKey = conversationKey;
    this._state = createInitialAgentState();
    this._messages = [];
    this._extensions = {};
    this._cursor = null;
    this._hadConnection = false;
    this._emit();
    if (wasOpen) this.connect();
  }

  /** @param {"sse" | "ws"} transport */
  setTransport(transport) {
    const wasOpen = this._wantOpen;
    this.disconnect();
    this.transport = transport;
    if (wasOpen) this.connect();
  }

  // Debug hook: drop the stream as a network failure would, then resume from the cursor.
  debugKillConnection() {
    if (!this._wantOpen) return;
    this._closeStream();
    this._scheduleReconnect(0);
  }

  /** @param {string | null} since */
  _open(since) {
    this._closeStream();
    this._setConnection(this._hadConnection ? "reconnecting" : "connecting");
    if (this.transport === "ws") this._openSocket(since);
    else this._openEventSource(since);
  }

  /** @param {string | null} since */
  _openEventSource(since) {
    /** @type {Record<string, string>} */
    const params = {};
    if (since) params.since = since;
    const es = new EventSource(this._url(this._path("events"), params));
    this._source = es;
    es.onopen = () => this._opened();
    es.onmessage = (msg) => {
      if (msg.lastEventId) this._cursor = msg.lastEventId;
      this._onEvent(JSON.parse(msg.data));
    };
    es.addEventListener("snapshot", (msg) => this._onSnapshot(JSON.parse(msg.data)));
    es.addEventListener("extension", (msg) => {
      if (msg.lastEventId) this._cursor = msg.lastEventId;
      const { key, value } = JSON.parse(msg.data);
      this._extensions = { ...this._extensions, [key]: value };
      this._emit();
    });
    es.onerror = () => {
      if (this._source !== es) return;
      // EventSource reconnects by itself, sending Last-Event-ID; if it gave up, we reopen.
      if (es.readyState === EventSource.CLOSED) {
        this._closeStream();
        this._scheduleReconnect(this.reconnectDelayMs);
      } else {
        this.counters.reconnects += 1;
        this._setConnection("reconnecting");
      }
    };
  }

  /** @param {string | null} since */
  _openSocket(since) {
    /** @type {Record<string, string>} */
    const params = {};
    if (since) params.since = since;
    const url = new URL(this._url(this._path("ws"), params), globalThis.location?.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(url.toString());
    this._socket = ws;
    ws.onopen = () => this._opened();
    ws.onmessage = (msg) => {
      const frame = JSON.parse(msg.data);
      if (frame.type === "snapshot") this._onSnapshot(frame);
      else if (frame.type === "event") {
        this._cursor = frame.cursor;
        this._onEvent(frame.event);
      } else if (frame.type === "extension") {
        this._cursor = frame.cursor;
        this._extensions = { ...this._extensions, [frame.key]: frame.value };
        this._emit();
      } else if (frame.type === "error") {
        this.lastError = frame;
        this._emit();
      }
    };
    ws.onclose = () => {
      if (this._socket !== ws) return;
      this._socket = null;
      if (this._wantOpen) this._scheduleReconnect(this.reconnectDelayMs);
    };
  }

  _opened() {
    this._setConnection(this._hadConnection ? "resumed" : "open");
    this._hadConnection = true;
  }

  /** @param {number} delay */
  _scheduleReconnect(delay) {
    if (!this._wantOpen || this._timer) return;
    this.counters.reconnects += 1;
    this._setConnection("reconnecting");
    this._timer = setTimeout(() => {
      this._timer = null;
      if (this._wantOpen) this._open(this._cursor);
    }, delay);
  }

  _closeStream() {
    if (this._timer) { clearTimeout(this._timer); this._timer = null; }
    if (this._source) { this._source.close(); this._source = null; }
    if (this._socket) { const ws = this._socket; this._socket = null; ws.close(); }
  }

  /** @param {{ agentState?: AgentState, extensions?: Record<string, unknown>, cursor?: string }} snapshot */
  _onSnapshot(snapshot) {
    this.counters.snapshots += 1;
    this._state = structuredClone(snapshot.agentState ?? createInitialAgentState());
    this._extensions = snapshot.extensions ?? {};
    this._cursor = snapshot.cursor ?? this._cursor;
    this._messages = projectMessages(this._state);
    this._emit();
  }

  /** @param {AgentEvent} event */
  _onEvent(event) {
    const { state, outcome } = applyAgentEvent(this._state, event);
    if (outcome === "duplicate") { this.counters.duplicates += 1; return; }
    if (outcome === "invalid") { this.counters.invalid += 1; return; }
    this.counters.events += 1;
    this._state = state;
    if (event.type.startsWith("message.") || event.type === "run.started") {
      this._messages = projectMessages(this._state);
    }
    this._emit();
  }

  /** @param {ConnectionState} value */
  _setConnection(value) {
    if (this.connection === value) return;
    this.connection = value;
    this._emit();
  }

  _emit() {
    this._snapshot = null;
    for (const listener of [...this._listeners]) {
      try { listener(this); } catch (err) { console.error(err); }
    }
  }

  // -- HTTP -----------------------------------------------------------------------------------

  /**
   * @param {Promise<unknown>} promise
   * @returns {Promise<unknown>}
   */
  async _tracked(promise) {
    this._pending += 1;
    this._emit();
    try { return await promise; } finally { this._pending -= 1; this._emit(); }
  }

  /**
   * @param {string} tail
   * @param {unknown} body
   * @returns {Promise<any>} the answer's JSON
   */
  async _post(tail, body) {
    const r = await this._fetch(this._url(this._path(tail)), {
      method: "POST",
      headers: { "content-type": "application/json", ...this._headers() },
      body: JSON.stringify(body),
    });
    const data = await r.json().catch(() => null);
    if (!r.ok) {
      const err = new GatewayError(r.status, data);
      this.lastError = { code: err.code, message: err.message };
      this._emit();
      throw err;
    }
    return data;
  }

  /** @param {string} tail */
  _path(tail) {
    return `/v1/conversations/${encodeURIComponent(this.conversationKey)}/${tail}`;
  }

  /** @returns {Record<string, string>} */
  _headers() {
    return this.accessToken ? { authorization: `Bearer ${this.accessToken}` } : {};
  }

  /**
   * @param {string} path
   * @param {Record<string, string>} [params]
   */
  _url(path, params = {}) {
    const query = new URLSearchParams(params);
    if (this.accessToken && (path.endsWith("/events") || path.endsWith("/ws"))) {
      query.set("access_token", this.accessToken); // EventSource/WebSocket cannot set headers
    }
    const qs = query.toString();
    return `${this.baseUrl}${path}${qs ? `?${qs}` : ""}`;
  }
}

/** @param {GatewayClientOptions} [options] */
export function createGatewayClient(options) {
  return new GatewayClient(options);
}
