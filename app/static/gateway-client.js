// gateway-client.js — a small ES module client for the Agent Event Gateway (protocol 0.1).
//
// Copy it into any frontend; no dependencies, no build step.
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
// applied with a compact port of the reducer rules (protocol.md §4), and projects `messages`
// (protocol.md §8). On reconnect it resumes from the last cursor (Last-Event-ID, or ?since=),
// so no event is lost or applied twice.

export const PROTOCOL_VERSION = "0.1";

// ---------------------------------------------------------------------------------------------
// Reducer (protocol.md §3–4)

export function entityKey(runId, id) {
  return `${runId.length}:${runId}${id}`; // .length counts UTF-16 code units, as the spec says
}

export function createInitialState() {
  return {
    sessions: {}, runs: {}, messages: {}, reasoning: {}, toolCalls: {}, approvals: {},
    tasks: {}, artifacts: {}, order: [], issues: [], processedEventIds: {}, lastSequenceByRun: {},
  };
}

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

// family -> [state map, id field, order kind, initial status]
const FAMILIES = {
  message: ["messages", "messageId", "message", "streaming"],
  reasoning: ["reasoning", "reasoningId", "reasoning", "streaming"],
  tool: ["toolCalls", "toolCallId", "tool", "pending"],
  approval: ["approvals", "approvalId", "approval", "waiting"],
  task: ["tasks", "taskId", "task", "pending"],
  artifact: ["artifacts", "artifactId", "artifact", "streaming"],
};
const START_EVENTS = {
  "message.started": "message", "reasoning.started": "reasoning", "tool.requested": "tool",
  "approval.requested": "approval", "task.created": "task", "artifact.created": "artifact",
};
const has = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);
const pick = (src, keys) => {
  const out = {};
  for (const k of keys) if (src[k] !== undefined) out[k] = src[k];
  return out;
};

function createEntity(family, event) {
  const p = event.payload;
  const base = { id: p[FAMILIES[family][1]], runId: event.runId, status: FAMILIES[family][3],
    createdAt: event.timestamp, updatedAt: event.timestamp };
  if (event.parentId !== undefined) base.parentId = event.parentId;
  if (event.meta !== undefined) base.meta = event.meta;
  switch (family) {
    case "message": return { ...base, role: p.role, content: p.content ?? "" };
    case "reasoning": return { ...base, content: "", redacted: p.redacted ?? false };
    case "tool": return { ...base, name: p.name, arguments: p.arguments ?? "", attempt: p.attempt ?? 1,
      ...pick(p, ["index", "retryOf"]) };
    case "approval": return { ...base,
      ...pick(p, ["toolCallId", "description", "risk", "data", "editable", "expiresAt", "version"]) };
    case "task": return { ...base, title: p.title, ...pick(p, ["description"]) };
    default: return { ...base, name: p.name, ...pick(p, ["mediaType", "content"]) };
  }
}

function appendContent(content, delta) {
  if (typeof content === "string" && typeof delta === "string") return content + delta;
  const parts = (v) => (typeof v === "string" ? [{ type: "text", text: v }] : v);
  return [...parts(content), ...parts(delta)];
}

// Apply one follow-up event to a copy of its entity; returns the new entity.
function updateEntity(entity, event) {
  const p = event.payload;
  const e = { ...entity, updatedAt: event.timestamp };
  const action = event.type.slice(event.type.indexOf(".") + 1);
  if (action === "failed") { e.error = p.error; e.status = "failed"; return e; }
  if (action === "cancelled") { e.reason = p.reason; e.status = "cancelled"; return e; }
  switch (event.type) {
    case "message.delta": e.content = appendContent(e.content, p.delta); break;
    case "message.completed": e.content = p.content ?? e.content; e.status = "completed"; break;
    case "reasoning.delta": e.content += p.delta; break;
    case "reasoning.completed":
      e.content = p.content ?? e.content; e.summary = p.summary; e.status = "completed"; break;
    case "tool.arguments_delta": e.arguments += p.delta; break;
    case "tool.running": e.status = "running"; break;
    case "tool.completed": e.result = p.result; e.status = "completed"; break;
    case "approval.resolved":
      e.decision = p.decision; e.data = p.data ?? e.data; e.status = "completed"; break;
    case "task.updated":
      e.title = p.title ?? e.title; e.description = p.description ?? e.description;
      e.progress = p.progress ?? e.progress; e.status = "running"; break;
    case "task.completed": e.result = p.result; e.status = "completed"; break;
    case "artifact.updated": e.content = p.content; e.version = p.version ?? e.version; break;
    case "artifact.completed":
      e.content = p.content ?? e.content; e.version = p.version ?? e.version;
      e.status = "completed"; break;
    default: break;
  }
  return e;
}

// Apply one AgentEvent to `state` in place. Returns "duplicate", "accepted" or the issue.
export function applyEvent(state, event) {
  const { runId } = event;
  const eventKey = entityKey(runId, event.eventId);
  if (state.processedEventIds[eventKey]) return "duplicate";
  const reject = (code, message) => {
    state.processedEventIds[eventKey] = true;
    const issue = { code, eventId: event.eventId, runId, message };
    state.issues = [...state.issues, issue];
    return issue;
  };
  const last = state.lastSequenceByRun[runId];
  if (last !== undefined && event.sequence <= last) {
    return reject("invalid_sequence", `Sequence ${event.sequence} must be greater than ${last}.`);
  }
  const run = has(state.runs, runId) ? state.runs[runId] : undefined;
  const isLifecycle = event.type === "session.started" || event.type === "run.started";
  if (run && event.type !== "session.started" && run.sessionId !== event.sessionId) {
    return reject("invalid_transition", `Run "${runId}" belongs to another session.`);
  }
  if (run && !isLifecycle && run.status !== "running") {
    return reject("invalid_transition", `Run "${runId}" is already ${run.status}.`);
  }
  const [family, verb] = [event.type.slice(0, event.type.indexOf(".")), event.type];
  if (verb === "session.started") {
    if (has(state.sessions, event.sessionId)) return reject("duplicate_entity", "Session exists.");
    state.sessions = { ...state.sessions, [event.sessionId]: {
      id: event.sessionId, title: event.payload.title, createdAt: event.timestamp } };
  } else if (verb === "run.started") {
    if (run) return reject("duplicate_entity", `Run "${runId}" already exists.`);
    state.runs = { ...state.runs, [runId]: { id: runId, sessionId: event.sessionId,
      status: "running", input: event.payload.input, createdAt: event.timestamp,
      updatedAt: event.timestamp } };
  } else if (family === "run") {
    if (!run) return reject("missing_run", `Run "${runId}" must be started first.`);
    const status = verb.slice(4);
    const next = { ...run, status, updatedAt: event.timestamp };
    if (status === "completed") { next.output = event.payload.output; next.usage = event.payload.usage; }
    if (status === "failed") next.error = event.payload.error;
    if (status === "cancelled") next.reason = event.payload.reason;
    state.runs = { ...state.runs, [runId]: next };
  } else if (has(START_EVENTS, verb)) {
    const kind = START_EVENTS[verb];
    const [mapName, idField] = FAMILIES[kind];
    if (!run) return reject("missing_run", `Run "${runId}" must be started first.`);
    const key = entityKey(runId, event.payload[idField]);
    if (has(state[mapName], key)) return reject("duplicate_entity", `${kind} exists.`);
    state[mapName] = { ...state[mapName], [key]: createEntity(kind, event) };
    state.order = [...state.order, { kind, id: event.payload[idField], runId }];
  } else if (has(FAMILIES, family)) {
    const [mapName, idField] = FAMILIES[family];
    const id = event.payload[idField];
    const key = entityKey(runId, id);
    const entity = has(state[mapName], key) ? state[mapName][key] : undefined;
    if (!entity) return reject("missing_entity", `${family} "${id}" does not exist.`);
    if (TERMINAL.has(entity.status)) {
      return reject("invalid_transition", `${family} "${id}" is already ${entity.status}.`);
    }
    state[mapName] = { ...state[mapName], [key]: updateEntity(entity, event) };
  } else {
    return "duplicate"; // unknown type: the gateway never sends one; ignore
  }
  state.processedEventIds[eventKey] = true;
  state.lastSequenceByRun = { ...state.lastSequenceByRun, [runId]: event.sequence };
  return "accepted";
}

// The useXChat `messages` projection (protocol.md §8).
export function projectMessages(state) {
  const out = [];
  for (const ref of state.order) {
    if (ref.kind !== "message") continue;
    const key = entityKey(ref.runId, ref.id);
    const message = state.messages[key];
    if (!message) continue;
    let status = "updating";
    if (message.status === "failed") status = "error";
    else if (message.status === "cancelled") status = "abort";
    else if (message.role === "user") status = "local";
    else if (message.status === "completed") status = "success";
    out.push({ id: key, message, status });
  }
  return out;
}

export function anyRunRunning(state) {
  return Object.values(state.runs).some((run) => run.status === "running");
}

// ---------------------------------------------------------------------------------------------
// Client

export class GatewayError extends Error {
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
  constructor(options = {}) {
    this.baseUrl = (options.baseUrl ?? "").replace(/\/$/, "");
    this.conversationKey = options.conversationKey ?? "default";
    this.provider = options.provider ?? null;
    this.transport = options.transport ?? "sse";
    this.accessToken = options.accessToken ?? null;
    this.reconnectDelayMs = options.reconnectDelayMs ?? 500;
    this._fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this._listeners = new Set();
    this._snapshot = null;
    this._state = createInitialState();
    this._messages = [];
    this._extensions = {};
    this._cursor = null;
    this._pending = 0;
    this._source = null;
    this._socket = null;
    this._timer = null;
    this._wantOpen = false;
    this._hadConnection = false;
    this.connection = "idle";
    this.lastError = null;
    this.counters = { events: 0, duplicates: 0, snapshots: 0, reconnects: 0 };
  }

  // -- useXChat-shaped surface ----------------------------------------------------------------
  get messages() { return this._messages; }
  get agentState() { return this._state; }
  get isRequesting() { return this._pending > 0 || anyRunRunning(this._state); }
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
  subscribe = (listener) => {
    this._listeners.add(listener);
    return () => this._listeners.delete(listener);
  };

  getSnapshot = () => {
    if (!this._snapshot) {
      this._snapshot = {
        messages: this._messages, agentState: this._state, isRequesting: this.isRequesting,
        connection: this.connection, cursor: this._cursor, issues: this._state.issues,
      };
    }
    return this._snapshot;
  };

  onRequest(input, { provider, multitask } = {}) {
    const body = { input: typeof input === "string" ? { prompt: input } : input };
    const name = provider ?? this.provider;
    if (name) body.provider = name;
    if (multitask) body.multitask = multitask;
    return this._tracked(this._post("runs", body));
  }

  onReload(input, { provider } = {}) {
    const body = {};
    if (input !== undefined) body.input = typeof input === "string" ? { prompt: input } : input;
    const name = provider ?? this.provider;
    if (name) body.provider = name;
    return this._tracked(this._post("reload", body));
  }

  abort(runId) {
    return this._post("abort", runId ? { runId } : {});
  }

  approve(approvalId, decision = "approved", data) {
    const body = { decision };
    if (data !== undefined) body.data = data;
    return this._post(`approvals/${encodeURIComponent(approvalId)}`, body);
  }

  submitToolResult(toolCallId, result, isError = false) {
    const body = { result };
    if (isError) body.isError = true;
    return this._post(`tools/${encodeURIComponent(toolCallId)}/result`, body);
  }

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
  setConversation(conversationKey) {
    const wasOpen = this._wantOpen;
    this.disconnect();
    this.conversationKey = conversationKey;
    this._state = createInitialState();
    this._messages = [];
    this._extensions = {};
    this._cursor = null;
    this._hadConnection = false;
    this._emit();
    if (wasOpen) this.connect();
  }

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

  _open(since) {
    this._closeStream();
    this._setConnection(this._hadConnection ? "reconnecting" : "connecting");
    if (this.transport === "ws") this._openSocket(since);
    else this._openEventSource(since);
  }

  _openEventSource(since) {
    const params = {};
    if (since) params.since = since;
    const es = new EventSource(this._url(this._path("events"), params));
    this._source = es;
    es.onopen = () => this._opened();
    es.onmessage = (msg) => {
      if (msg.lastEventId) this._cursor = msg.lastEventId;
      this._onEvent(JSON.parse(msg.data), msg.lastEventId);
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

  _openSocket(since) {
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
        this._onEvent(frame.event, frame.cursor);
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

  _onSnapshot(snapshot) {
    this.counters.snapshots += 1;
    this._state = structuredClone(snapshot.agentState ?? createInitialState());
    this._extensions = snapshot.extensions ?? {};
    this._cursor = snapshot.cursor ?? this._cursor;
    this._messages = projectMessages(this._state);
    this._emit();
  }

  _onEvent(event) {
    const result = applyEvent(this._state, event);
    if (result === "duplicate") { this.counters.duplicates += 1; return; }
    this.counters.events += 1;
    this._state = { ...this._state };
    if (event.type.startsWith("message.") || event.type === "run.started") {
      this._messages = projectMessages(this._state);
    }
    this._emit();
  }

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

  async _tracked(promise) {
    this._pending += 1;
    this._emit();
    try { return await promise; } finally { this._pending -= 1; this._emit(); }
  }

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

  _path(tail) {
    return `/v1/conversations/${encodeURIComponent(this.conversationKey)}/${tail}`;
  }

  _headers() {
    return this.accessToken ? { authorization: `Bearer ${this.accessToken}` } : {};
  }

  _url(path, params = {}) {
    const query = new URLSearchParams(params);
    if (this.accessToken && (path.endsWith("/events") || path.endsWith("/ws"))) {
      query.set("access_token", this.accessToken); // EventSource/WebSocket cannot set headers
    }
    const qs = query.toString();
    return `${this.baseUrl}${path}${qs ? `?${qs}` : ""}`;
  }
}

export function createGatewayClient(options) {
  return new GatewayClient(options);
}
