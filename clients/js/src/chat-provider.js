// chat-provider.js — the gateway as a chat provider for @ant-design/x-sdk's useXChat (2.9).
//
//   import { useXChat } from "@ant-design/x-sdk";
//   import { AgentGatewayChatProvider } from "@agent-gateway/client/chat-provider";
//   const provider = new AgentGatewayChatProvider({ conversationKey: "c1", provider: "demo" });
//   const { messages, onRequest, abort } = useXChat({ provider, conversationKey: "c1" });
//   onRequest({ prompt: "hi" });
//
// Each onRequest is one gateway run: `POST …/runs?stream=true` with an Idempotency-Key, whose
// SSE answer is this run's AgentEvents (its `X-Run-Id` header names the run: the stream may
// begin with the end of runs queued before it). The assistant message is those events folded with the
// protocol's reducer (agent-reducer.js), so text, reasoning, tools, approvals, tasks and
// artifacts are on it for rendering. A dropped stream is resumed by re-sending the same POST
// with the same Idempotency-Key and `Last-Event-ID` (http-api.md "?stream=true"): the same run
// continues, none is started twice. `abort()` asks the gateway to cancel the run (closing the
// stream alone would only detach) and ends the request when `run.cancelled` has arrived.

import { AbstractChatProvider, AbstractXRequestClass } from "@ant-design/x-sdk";

import { applyAgentEvent, createInitialAgentState, entityKey } from "./agent-reducer.js";
import { readSSE } from "./sse.js";

/**
 * @typedef {import("./agent-reducer.js").AgentState} AgentState
 * @typedef {import("./agent-reducer.js").EntityKind} EntityKind
 * @typedef {import("./agent-reducer.js").MessageContent} MessageContent
 * @typedef {import("./chat-provider.js").AgentChatAssistantMessage} AgentChatAssistantMessage
 * @typedef {import("./chat-provider.js").AgentChatChunk} AgentChatChunk
 * @typedef {import("./chat-provider.js").AgentChatInput} AgentChatInput
 * @typedef {import("./chat-provider.js").AgentChatMessage} AgentChatMessage
 * @typedef {import("./chat-provider.js").AgentGatewayChatProviderOptions} AgentGatewayChatProviderOptions
 * @typedef {import("./chat-provider.js").AgentGatewayRequestOptions} AgentGatewayRequestOptions
 * @typedef {import("./chat-provider.js").ChatMessageInfo} ChatMessageInfo
 * @typedef {import("@ant-design/x-sdk").XRequestOptions<AgentChatInput, AgentChatChunk, AgentChatMessage>} XRequestOptions
 */
/**
 * One request's stream: its Idempotency-Key, its run once known, and how it is being ended.
 * @typedef {{
 *   key: string, runId: string | undefined, aborting: boolean, detached: boolean, cut: null,
 *   controller?: AbortController, abortTimer?: ReturnType<typeof setTimeout>, abortError?: unknown,
 * }} Current
 */

/** @type {Set<unknown>} */
const RUN_TERMINALS = new Set(["run.completed", "run.failed", "run.cancelled"]);
/** The response header naming the run a `?stream=true` answer is for (http-api.md). */
const RUN_ID_HEADER = "x-run-id";
/** @type {Record<EntityKind, import("./agent-reducer.js").EntityMapName>} */
const MAP_OF_KIND = {
  message: "messages", reasoning: "reasoning", tool: "toolCalls", approval: "approvals",
  task: "tasks", artifact: "artifacts",
};

export class GatewayRequestError extends Error {
  /**
   * @param {number} status
   * @param {any} body the answer's JSON (an error document, or anything else)
   */
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.name = "GatewayRequestError";
    this.status = status;
    this.code = err.code || "http_error";
    this.details = err.details;
  }
}

/** @param {string} [message] */
function abortError(message = "The run was aborted") {
  const err = new Error(message);
  err.name = "AbortError";
  return err;
}

function newKey() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** @param {number} ms @returns {Promise<void>} */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// Folding a run's events into the message useXChat renders

/** The text of message content (a string, or parts whose `text` is joined). */
/** @param {MessageContent | undefined} content @returns {string} */
export function contentText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => (typeof part?.text === "string" ? part.text : "")).join("");
}

/**
 * @template {EntityKind} K
 * @param {AgentState} state
 * @param {K} kind
 * @param {string} runId
 * @returns {any[]} the entities of that kind (the map's own type)
 */
function entitiesOf(state, kind, runId) {
  /** @type {Record<string, unknown>} */
  const map = state[MAP_OF_KIND[kind]];
  const out = [];
  for (const ref of state.order) {
    if (ref.kind !== kind || ref.runId !== runId) continue;
    const key = entityKey(ref.runId, ref.id);
    if (Object.hasOwn(map, key)) out.push(map[key]);
  }
  return out;
}

/**
 * The assistant message of one run of `state`: its text (assistant messages joined), the run's
 * status and error, and its entities in stream order. `state` stays on the message so that the
 * next event folds into it.
 */
/**
 * @param {AgentState} state
 * @param {string | undefined} runId
 * @returns {AgentChatAssistantMessage}
 */
export function assistantMessage(state, runId) {
  const run = runId && Object.hasOwn(state.runs, runId) ? state.runs[runId] : undefined;
  const messages = runId ? entitiesOf(state, "message", runId).filter((m) => m.role !== "user") : [];
  /** @type {AgentChatAssistantMessage} */
  const message = {
    role: "assistant",
    content: messages.map((m) => contentText(m.content)).filter(Boolean).join("\n\n"),
    runId,
    status: run?.status ?? "running",
    messages,
    reasoning: runId ? entitiesOf(state, "reasoning", runId) : [],
    toolCalls: runId ? entitiesOf(state, "tool", runId) : [],
    approvals: runId ? entitiesOf(state, "approval", runId) : [],
    tasks: runId ? entitiesOf(state, "task", runId) : [],
    artifacts: runId ? entitiesOf(state, "artifact", runId) : [],
    state,
  };
  if (run?.error) message.error = run.error;
  if (run?.reason) message.reason = run.reason;
  return message;
}

/** The run a chunk names first: the request's run when the gateway did not name it. */
/** @param {AgentChatChunk | undefined} chunk */
function runIdOfChunk(chunk) {
  if (chunk?.type === "run.started") return chunk.runId;
  if (chunk?.type === "snapshot") return chunk.runId;
  return undefined;
}

/**
 * Folds one chunk (an AgentEvent, or a `{type: "snapshot"}` frame) into a message. `runId` is
 * the request's run when known (the stream's `X-Run-Id`): the stream may begin with the end of
 * runs queued before it, so its first `run.started` is not always the request's.
 */
/**
 * @param {AgentChatMessage | undefined} message
 * @param {AgentChatChunk} chunk
 * @param {string} [runId]
 * @returns {AgentChatAssistantMessage}
 */
export function foldChunk(message, chunk, runId = undefined) {
  const prior = /** @type {Partial<AgentChatAssistantMessage> | undefined} */ (message); // a user message has neither
  const base = prior?.state ?? createInitialAgentState();
  runId = prior?.runId ?? runId ?? runIdOfChunk(chunk);
  let state = base;
  if (chunk?.type === "snapshot") {
    state = structuredClone(chunk.agentState ?? createInitialAgentState());
    runId = runId ?? chunk.runId;
  } else if (chunk && typeof chunk === "object") {
    state = applyAgentEvent(base, chunk).state;
  }
  return assistantMessage(state, runId);
}

/** @type {Record<string, ChatMessageInfo["status"]>} */
const UI_STATUS = { running: "updating", completed: "success", failed: "error", cancelled: "abort" };

/**
 * useXChat `MessageInfo`s of a conversation's snapshot state: per run, the user's turn and the
 * assistant message (for `defaultMessages`, so a reloaded page shows the conversation again).
 */
/** @param {AgentState} agentState @returns {ChatMessageInfo[]} */
export function messagesFromState(agentState) {
  const runs = Object.values(agentState?.runs ?? {}).sort((a, b) => a.createdAt - b.createdAt);
  /** @type {ChatMessageInfo[]} */
  const out = [];
  for (const run of runs) {
    const user = entitiesOf(agentState, "message", run.id).filter((m) => m.role === "user");
    const asked = /** @type {{ prompt?: unknown } | undefined} */ (run.input)?.prompt;
    const prompt = user.length
      ? user.map((m) => contentText(m.content)).join("\n")
      : typeof asked === "string" ? asked : "";
    if (prompt) {
      out.push({ id: `${run.id}:user`, message: { role: "user", content: prompt }, status: "local" });
    }
    out.push({
      id: `${run.id}:assistant`,
      message: assistantMessage(agentState, run.id),
      status: UI_STATUS[run.status] ?? "success",
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The request: XRequest's contract (manual, run, abort, callbacks), spoken to the gateway

/**
 * An `XRequest`-compatible request for one conversation of the gateway. `baseURL` is the
 * gateway's `/v1/conversations` URL; `options` as XRequest's, plus `conversationKey`,
 * `provider`, `multitask`, `accessToken` and `abortTimeout` (ms to wait for `run.cancelled`).
 */
/** @extends {AbstractXRequestClass<AgentChatInput, AgentChatChunk, AgentChatMessage>} */
export class AgentGatewayRequest extends AbstractXRequestClass {
  /**
   * @param {string} baseURL
   * @param {AgentGatewayRequestOptions} options
   */
  constructor(baseURL, options = /** @type {AgentGatewayRequestOptions} */ ({})) {
    super(baseURL, { retryInterval: 500, retryTimes: 5, abortTimeout: 10000, ...options, manual: true });
    /** @type {AgentGatewayRequestOptions} */
    this.options; // declares the type of the base class's options (reads it, no effect)
    this._isRequesting = false;
    this._isTimeout = false;
    /** @type {AbortController | null} */
    this._controller = null;
    /** @type {Promise<void>} */
    this._asyncHandler = Promise.resolve();
    /** @type {Current | null} */
    this._current = null;
  }

  get asyncHandler() { return this._asyncHandler; }
  get isTimeout() { return this._isTimeout; }
  get isStreamTimeout() { return false; }
  get isRequesting() { return this._isRequesting; }
  get manual() { return true; }
  /** The gateway run of the current (or last) request, once its `run.started` arrived. */
  get runId() { return this._current?.runId; }
  /** The Idempotency-Key of the current (or last) request. */
  get idempotencyKey() { return this._current?.key; }

  get conversationKey() { return this.options.conversationKey; }

  /** `params` is the body of `POST …/runs` (`{input, provider?, multitask?}`), or `{reload: true, …}`. */
  /** @param {AgentChatInput} [params] */
  run(params = {}) {
    const { reload, ...body } = params;
    /** @type {Current} */
    const current = { key: newKey(), runId: undefined, aborting: false, detached: false, cut: null };
    this._current = current;
    this._isRequesting = true;
    this._asyncHandler = this._drive(current, reload ? "reload" : "runs", body);
    return true;
  }

  /** Cancels the run on the gateway; the request ends (AbortError) once `run.cancelled` arrived. */
  abort() {
    const current = this._current;
    if (!current || !this._isRequesting || current.aborting) return;
    current.aborting = true;
    if (current.runId) this._postAbort(current);
    // Should the gateway not answer, stop waiting after abortTimeout.
    current.abortTimer = setTimeout(() => this._cut(current), this.options.abortTimeout);
  }

  /** Closes the stream without cancelling the run (it goes on server-side). */
  detach() {
    const current = this._current;
    if (!current || !this._isRequesting) return;
    current.detached = true;
    this._cut(current);
  }

  /** @param {Current} current */
  _cut(current) {
    if (current.controller) current.controller.abort();
  }

  /** @param {Current} current */
  _postAbort(current) {
    this._post("abort", { runId: current.runId }).catch((err) => {
      current.abortError = err;
      this._cut(current);
    });
  }

  /** @param {string} tail */
  _url(tail) {
    const base = this.baseURL.replace(/\/$/, "");
    return `${base}/${encodeURIComponent(this.options.conversationKey)}/${tail}`;
  }

  /** @param {Record<string, string>} [extra] */
  _headers(extra = {}) {
    /** @type {Record<string, string>} */
    const headers = { "content-type": "application/json", ...(this.options.headers ?? {}), ...extra };
    if (this.options.accessToken) headers.authorization = `Bearer ${this.options.accessToken}`;
    return headers;
  }

  /**
   * @param {string} url
   * @param {{ method?: string, headers: Record<string, string>, body?: string, signal?: AbortSignal }} init
   */
  _fetch(url, init) {
    const fetchImpl = this.options.fetch ?? globalThis.fetch.bind(globalThis);
    return fetchImpl(url, init);
  }

  /**
   * @param {string} tail
   * @param {unknown} body
   * @returns {Promise<any>} the answer's JSON
   */
  async _post(tail, body) {
    const r = await this._fetch(this._url(tail), {
      method: "POST", headers: this._headers(), body: JSON.stringify(body),
    });
    const data = await r.json().catch(() => null);
    if (!r.ok) throw new GatewayRequestError(r.status, data);
    return data;
  }

  /**
   * @param {Current} current
   * @param {string} route
   * @param {Record<string, unknown>} body
   */
  async _drive(current, route, body) {
    /** @returns {Partial<NonNullable<XRequestOptions["callbacks"]>>} */
    const callbacks = () => this.options.callbacks ?? {};
    /** @type {AgentChatChunk[]} */
    const chunks = [];
    let headers = new Headers();
    /** @type {string | undefined} */
    let lastEventId;
    let failures = 0;
    let ended = false;
    /** @type {string | undefined} */
    let terminal;
    /** @param {AgentChatChunk} chunk */
    const onChunk = (chunk) => {
      chunks.push(chunk);
      callbacks().onUpdate?.(chunk, headers);
    };
    try {
      while (!ended) {
        const controller = new AbortController();
        current.controller = controller;
        try {
          /** @type {Record<string, string>} */
          const extra = { "idempotency-key": current.key, accept: "text/event-stream" };
          if (lastEventId !== undefined) extra["last-event-id"] = lastEventId;
          const response = await this._fetch(this._url(`${route}?stream=true`), {
            method: "POST", headers: this._headers(extra), body: JSON.stringify(body),
            signal: controller.signal,
          });
          if (!response.ok) {
            throw new GatewayRequestError(response.status, await response.json().catch(() => null));
          }
          headers = response.headers;
          this._sawRun(current, headers.get(RUN_ID_HEADER) ?? undefined);
          const stream = /** @type {ReadableStream<Uint8Array>} */ (response.body); // a 200 has one
          for await (const frame of readSSE(stream)) {
            if (frame.id !== undefined) lastEventId = frame.id;
            failures = 0;
            if (frame.event === "snapshot") {
              const snap = JSON.parse(frame.data);
              const runId = current.runId ?? snap.activeRunId ?? undefined;
              this._sawRun(current, runId);
              onChunk({ type: "snapshot", runId, agentState: snap.agentState });
              const run = runId ? snap.agentState?.runs?.[runId] : undefined;
              if (run && run.status !== "running") { ended = true; terminal = `run.${run.status}`; }
            } else if (frame.event === "message") {
              const event = JSON.parse(frame.data);
              if (event?.type === "run.started" && !current.runId) this._sawRun(current, event.runId);
              onChunk(event);
              if (RUN_TERMINALS.has(event?.type) && event.runId === current.runId) {
                ended = true;
                terminal = event.type;
              }
            }
          }
          // The stream ended before this run's terminal: a dropped connection; resume below.
          if (!ended) throw new TypeError("the stream ended before the run did");
        } catch (/** @type {any} */ err) {
          if (current.detached) throw abortError("The stream was detached");
          if (current.aborting && (err?.name === "AbortError")) {
            throw current.abortError ?? abortError();
          }
          if (err instanceof GatewayRequestError && !(err.status >= 500 || err.status === 429)) throw err;
          if (err instanceof SyntaxError) throw err; // a frame that is not JSON: not retryable
          failures += 1;
          if (failures > (this.options.retryTimes ?? Infinity)) throw err; // as `> undefined`
          await sleep(this.options.retryInterval ?? 0);
        }
      }
      this._finish(current);
      if (current.aborting && terminal === "run.cancelled") {
        callbacks().onError?.(abortError(), undefined, headers);
      }
      else callbacks().onSuccess?.(chunks, headers);
    } catch (err) {
      this._finish(current);
      const error = err instanceof Error ? err : new Error(String(err));
      callbacks().onError?.(error, error instanceof GatewayRequestError ? { code: error.code } : undefined, headers);
    }
  }

  /** @param {Current} current @param {string | undefined} runId */
  _sawRun(current, runId) {
    if (!runId || current.runId) return;
    current.runId = runId;
    if (current.aborting) this._postAbort(current);
  }

  /** @param {Current} current */
  _finish(current) {
    clearTimeout(current.abortTimer);
    if (this._current === current) this._isRequesting = false;
  }
}

// ---------------------------------------------------------------------------------------------
// The provider

/**
 * A useXChat provider for one gateway conversation. Options: `baseUrl` (gateway origin, "" for
 * same origin), `conversationKey`, `provider` (gateway provider name; `setGatewayProvider`
 * switches it), `multitask`, `accessToken`, `headers`, `fetch`, `retryInterval`, `retryTimes`.
 */
/** @extends {AbstractChatProvider<AgentChatMessage, AgentChatInput, AgentChatChunk>} */
export class AgentGatewayChatProvider extends AbstractChatProvider {
  /** @param {AgentGatewayChatProviderOptions} [options] */
  constructor(options = {}) {
    const baseUrl = (options.baseUrl ?? "").replace(/\/$/, "");
    const conversationKey = options.conversationKey ?? "default";
    const { baseUrl: _b, conversationKey: _c, request, ...rest } = options;
    super({
      request: request ?? new AgentGatewayRequest(`${baseUrl}/v1/conversations`, {
        ...rest, conversationKey,
      }),
    });
    this.baseUrl = baseUrl;
  }

  /** @returns {AgentGatewayRequest} */
  get request() { return /** @type {AgentGatewayRequest} */ (super.request); }
  get conversationKey() { return this.request.options.conversationKey; }
  get gatewayProvider() { return this.request.options.provider ?? null; }
  /** The gateway provider the next runs use (the hook and its messages stay as they are). */
  /** @param {string | null} name */
  setGatewayProvider(name) { this.request.options.provider = name || undefined; }
  /** The gateway run of the current (or last) request. */
  get runId() { return this.request.runId; }

  /**
   * @param {Partial<AgentChatInput>} requestParams
   * @param {XRequestOptions} options
   * @returns {AgentChatInput}
   */
  transformParams(requestParams, options) {
    /** @type {Partial<AgentChatInput>} */
    const merged = { ...(options?.params ?? {}), ...(requestParams ?? {}) };
    const { prompt, input, provider, multitask, reload, ...extra } = merged;
    /** @type {AgentChatInput} */
    const body = {};
    if (input !== undefined) body.input = input;
    else if (prompt !== undefined) body.input = { prompt, ...extra };
    const name = provider ?? this.request.options.provider;
    if (name) body.provider = name;
    const policy = multitask ?? this.request.options.multitask;
    if (policy) body.multitask = policy;
    if (reload || body.input === undefined) body.reload = true;
    return body;
  }

  /** @param {Partial<AgentChatInput>} requestParams @returns {AgentChatMessage} */
  transformLocalMessage(requestParams) {
    const input = /** @type {{ prompt?: string, content?: MessageContent } | undefined} */ (
      requestParams?.input
    );
    const prompt = requestParams?.prompt ?? input?.prompt ?? contentText(input?.content);
    return { role: "user", content: prompt ?? "" };
  }

  /**
   * @param {import("@ant-design/x-sdk").TransformMessage<AgentChatMessage, AgentChatChunk>} info
   * @returns {AgentChatMessage}
   */
  transformMessage({ originMessage, chunk, chunks, responseHeaders }) {
    const runId = responseHeaders?.get?.(RUN_ID_HEADER) ?? undefined;
    if (chunk !== undefined) return foldChunk(originMessage, chunk, runId);
    if (originMessage) return originMessage;
    const none = /** @type {AgentChatMessage | undefined} */ (undefined);
    return (chunks ?? []).reduce((message, item) => foldChunk(message, item, runId), none)
      ?? assistantMessage(createInitialAgentState(), runId);
  }

  // -- commands ------------------------------------------------------------------------------

  /**
   * @param {string} approvalId @param {unknown} [data]
   * @param {string | number} [expectedVersion] the approval's `version`: the gateway refuses
   *   (409) a decision for another version, so it can only approve the call the user saw
   */
  approve(approvalId, data, expectedVersion) {
    /** @type {Record<string, unknown>} */
    const body = data === undefined ? { decision: "approved" } : { decision: "modified", data };
    if (expectedVersion !== undefined) body.expectedVersion = expectedVersion;
    return this._command(`approvals/${encodeURIComponent(approvalId)}`, body);
  }

  /** @param {string} approvalId */
  reject(approvalId) {
    return this._command(`approvals/${encodeURIComponent(approvalId)}`, { decision: "rejected" });
  }

  /** @param {string} toolCallId @param {unknown} result @param {boolean} [isError] */
  submitToolResult(toolCallId, result, isError = false) {
    /** @type {Record<string, unknown>} */
    const body = { result };
    if (isError) body.isError = true;
    return this._command(`tools/${encodeURIComponent(toolCallId)}/result`, body);
  }

  /** @param {string} toolCallId */
  retryTool(toolCallId) {
    return this._command(`tools/${encodeURIComponent(toolCallId)}/retry`, {});
  }

  /** Cancels a run on the gateway (default: the conversation's active one). */
  /** @param {string} [runId] */
  abortRun(runId) {
    return this._command("abort", runId ? { runId } : {});
  }

  /** The conversation's history as useXChat messages (`defaultMessages`); [] for a new key. */
  async loadMessages() {
    const r = await this.request._fetch(this.request._url("state"), { headers: this.request._headers() });
    if (r.status === 404) return [];
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new GatewayRequestError(r.status, body);
    return messagesFromState(body.agentState);
  }

  /** @param {string} tail @param {unknown} body */
  _command(tail, body) {
    return this.request._post(tail, body);
  }
}

/** `GET /v1/conversations`: the caller's conversations (first page), newest first. */
/** @param {{ baseUrl?: string, accessToken?: string, fetch?: typeof fetch, limit?: number }} [options] */
export async function listConversations({ baseUrl = "", accessToken, fetch: fetchImpl, limit } = {}) {
  const query = limit ? `?limit=${limit}` : "";
  /** @type {Record<string, string>} */
  const headers = accessToken ? { authorization: `Bearer ${accessToken}` } : {};
  const r = await (fetchImpl ?? globalThis.fetch)(`${baseUrl.replace(/\/$/, "")}/v1/conversations${query}`, { headers });
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new GatewayRequestError(r.status, body);
  return body;
}

/** `GET /v1/providers`: the gateway's configured providers. */
/** @param {{ baseUrl?: string, accessToken?: string, fetch?: typeof fetch }} [options] */
export async function listProviders({ baseUrl = "", accessToken, fetch: fetchImpl } = {}) {
  /** @type {Record<string, string>} */
  const headers = accessToken ? { authorization: `Bearer ${accessToken}` } : {};
  const r = await (fetchImpl ?? globalThis.fetch)(`${baseUrl.replace(/\/$/, "")}/v1/providers`, { headers });
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new GatewayRequestError(r.status, body);
  return body.providers;
}
