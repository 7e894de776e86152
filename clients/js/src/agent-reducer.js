// agent-reducer.js — the AgentState reducer of Agent Event protocol 0.1 (protocol.md §1–4, §8).
//
// The same rules as the gateway's Python core (`core/`): the event validity check, the reducer
// with its five issue codes and texts, entity keys and the useXChat message projection. No
// dependencies, no I/O; every export works in a browser and in Node.
//
//   import { createInitialAgentState, reduceAgentState, projectMessages } from "./agent-reducer.js";
//   let state = createInitialAgentState();
//   for (const event of events) state = reduceAgentState(state, event);
//   projectMessages(state); // [{ id, message, status }]

/**
 * @typedef {import("./agent-reducer.js").AgentEvent} AgentEvent
 * @typedef {import("./agent-reducer.js").AgentProtocolIssue} AgentProtocolIssue
 * @typedef {import("./agent-reducer.js").AgentState} AgentState
 * @typedef {import("./agent-reducer.js").ApplyOutcome} ApplyOutcome
 * @typedef {import("./agent-reducer.js").EntityKind} EntityKind
 * @typedef {import("./agent-reducer.js").EntityMapName} EntityMapName
 * @typedef {import("./agent-reducer.js").IssueCode} IssueCode
 * @typedef {import("./agent-reducer.js").MessageContent} MessageContent
 * @typedef {import("./agent-reducer.js").MessageState} MessageState
 * @typedef {import("./agent-reducer.js").ProjectedMessage} ProjectedMessage
 * @typedef {import("./agent-reducer.js").ValidationProblem} ValidationProblem
 */
/**
 * A JSON object being checked or folded: its fields are checked at run time, hence `any`.
 * @typedef {Record<string, any>} Json
 */
/** Where in a payload, and what is wrong; null when nothing is. @typedef {[string, string] | null} Problem */

export const PROTOCOL_VERSION = "0.1";

/** The 32 event types, in the protocol's order. */
export const EVENT_TYPES = Object.freeze([
  "session.started",
  "run.started", "run.completed", "run.failed", "run.cancelled",
  "message.started", "message.delta", "message.completed", "message.failed", "message.cancelled",
  "reasoning.started", "reasoning.delta", "reasoning.completed", "reasoning.failed",
  "reasoning.cancelled",
  "tool.requested", "tool.arguments_delta", "tool.running", "tool.completed", "tool.failed",
  "tool.cancelled",
  "approval.requested", "approval.resolved",
  "task.created", "task.updated", "task.completed", "task.failed", "task.cancelled",
  "artifact.created", "artifact.updated", "artifact.completed", "artifact.failed",
]);

export const APPROVAL_DECISIONS = Object.freeze(["approved", "rejected", "modified", "expired"]);
export const TERMINAL_STATUSES = Object.freeze(["completed", "failed", "cancelled"]);

/**
 * kind -> [state map, payload id field, label used in issue messages]
 * @type {Record<EntityKind, [EntityMapName, string, string]>}
 */
const KINDS = {
  message: ["messages", "messageId", "Message"],
  reasoning: ["reasoning", "reasoningId", "Reasoning"],
  tool: ["toolCalls", "toolCallId", "Tool call"],
  approval: ["approvals", "approvalId", "Approval"],
  task: ["tasks", "taskId", "Task"],
  artifact: ["artifacts", "artifactId", "Artifact"],
};
export const ENTITY_MAPS = Object.freeze(
  Object.fromEntries(Object.entries(KINDS).map(([kind, [map]]) => [kind, map])),
);
/** @type {Record<string, EntityKind>} */
const START_TYPES = {
  "message.started": "message", "reasoning.started": "reasoning", "tool.requested": "tool",
  "approval.requested": "approval", "task.created": "task", "artifact.created": "artifact",
};
const RUN_TERMINAL_TYPES = new Set(["run.completed", "run.failed", "run.cancelled"]);
/** @type {Set<string>} */
const TERMINAL = new Set(TERMINAL_STATUSES);

/** @param {object} obj @param {PropertyKey} key */
const hasOwn = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);
/** @param {Json} obj @param {string} key @returns {any} */
const get = (obj, key) => (hasOwn(obj, key) ? obj[key] : undefined);
/** @param {unknown} v @returns {v is Json} */
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
/** @param {unknown} v @returns {v is string} */
const isNonEmptyString = (v) => typeof v === "string" && v !== "";
/** @param {unknown} v @returns {v is number} */
const isFiniteNumber = (v) => typeof v === "number" && Number.isFinite(v);
// An own property even for a key such as "__proto__" (a plain assignment would set the prototype).
/** @param {object} obj @param {string} key @param {unknown} value */
const setOwn = (obj, key, value) => {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
};

// ---------------------------------------------------------------------------------------------
// Keys

/** Key of an entity in the state's maps: `${runId.length}:${runId}${id}` (UTF-16 length). */
/** @param {string} runId @param {string} id */
export function entityKey(runId, id) {
  return `${runId.length}:${runId}${id}`;
}

/** Key of an event in `processedEventIds` (the same shape as an entity key). */
export const eventKey = entityKey;

// ---------------------------------------------------------------------------------------------
// Validity (protocol.md §2): why a value is not an AgentEvent, or null

const NON_EMPTY = "must be a non-empty string";
const OPT_STR = "must be a string when present";

/** @param {Json} p @param {string} key @returns {Problem} */
const optStr = (p, key) =>
  hasOwn(p, key) && typeof p[key] !== "string" ? [`.${key}`, OPT_STR] : null;
/** @param {Json} p @param {string} key @returns {Problem} */
const reqStr = (p, key) => (isNonEmptyString(get(p, key)) ? null : [`.${key}`, NON_EMPTY]);
/** @param {Json} p @param {string} key @returns {Problem} */
const optBool = (p, key) =>
  hasOwn(p, key) && typeof p[key] !== "boolean"
    ? [`.${key}`, "must be a boolean when present"] : null;
/** @param {Json} p @param {string} key @returns {Problem} */
const optFinite = (p, key) =>
  hasOwn(p, key) && !isFiniteNumber(p[key])
    ? [`.${key}`, "must be a finite number when present"] : null;
/** @param {...() => Problem} checks @returns {Problem} */
const first = (...checks) => {
  for (const check of checks) {
    const problem = check();
    if (problem) return problem;
  }
  return null;
};

/** @param {unknown} value @param {string} where @returns {Problem} */
function errorProblem(value, where) {
  if (!isObject(value)) return [where, "must be an AgentError object"];
  if (!isNonEmptyString(get(value, "message"))) return [`${where}.message`, NON_EMPTY];
  if (hasOwn(value, "code") && typeof value.code !== "string") return [`${where}.code`, OPT_STR];
  if (hasOwn(value, "retryable") && typeof value.retryable !== "boolean") {
    return [`${where}.retryable`, "must be a boolean when present"];
  }
  return null;
}

/** @param {unknown} value @param {string} where @returns {Problem} */
function contentProblem(value, where) {
  if (typeof value === "string") return null;
  if (!Array.isArray(value)) return [where, "must be a string or an array of content parts"];
  for (let i = 0; i < value.length; i += 1) {
    const part = value[i];
    const at = `${where}[${i}]`;
    if (!isObject(part)) return [at, "must be a content part object"];
    const ptype = get(part, "type");
    if (!isNonEmptyString(ptype)) return [`${at}.type`, NON_EMPTY];
    if (ptype === "text") {
      if (typeof get(part, "text") !== "string") return [`${at}.text`, "must be a string"];
    } else if (ptype === "image" || ptype === "file") {
      const keys = ptype === "image" ? ["url", "mediaType"] : ["url", "mediaType", "name"];
      for (const key of keys) {
        if (hasOwn(part, key) && typeof part[key] !== "string") return [`${at}.${key}`, OPT_STR];
      }
    } else if (!ptype.includes(".")) {
      return [`${at}.type`, "must be text, image, file or a namespaced '<ns>.<name>' type"];
    } else if (!hasOwn(part, "data")) {
      return [`${at}.data`, "is required for a namespaced content part"];
    }
  }
  return null;
}

/** @param {Json} p @param {string} key @returns {Problem} */
const optContent = (p, key) => (hasOwn(p, key) ? contentProblem(p[key], `.${key}`) : null);
/** @param {Json} p */
const withError = (p) => errorProblem(get(p, "error"), ".error");
/** @param {Json} p */
const withReason = (p) => optStr(p, "reason");
/** @param {Json} p @returns {Problem} */
const stringDelta = (p) => (typeof get(p, "delta") === "string" ? null : [".delta", "must be a string"]);
const nothing = () => null;

/**
 * @param {string} key
 * @param {(p: Json) => Problem} rest
 * @returns {(p: Json) => Problem}
 */
function withId(key, rest) {
  return (p) => (isNonEmptyString(get(p, key)) ? rest(p) : [`.${key}`, NON_EMPTY]);
}

/** @type {Record<string, (p: Json) => Problem>} */
const PAYLOAD_CHECKS = {
  "session.started": (p) => optStr(p, "title"),
  "run.started": nothing,
  "run.completed": (p) => {
    if (!hasOwn(p, "usage")) return null;
    const usage = p.usage;
    if (!isObject(usage)) return [".usage", "must be an object of finite numbers when present"];
    for (const [key, value] of Object.entries(usage)) {
      if (!isFiniteNumber(value)) return [`.usage.${key}`, "must be a finite number"];
    }
    return null;
  },
  "run.failed": withError,
  "run.cancelled": withReason,
  "message.started": withId("messageId", (p) =>
    first(() => reqStr(p, "role"), () => optContent(p, "content"))),
  "message.delta": withId("messageId", (p) =>
    (hasOwn(p, "delta") ? contentProblem(p.delta, ".delta") : [".delta", "is required"])),
  "message.completed": withId("messageId", (p) => optContent(p, "content")),
  "message.failed": withId("messageId", withError),
  "message.cancelled": withId("messageId", withReason),
  "reasoning.started": withId("reasoningId", (p) => optBool(p, "redacted")),
  "reasoning.delta": withId("reasoningId", stringDelta),
  "reasoning.completed": withId("reasoningId", (p) =>
    first(() => optStr(p, "content"), () => optStr(p, "summary"))),
  "reasoning.failed": withId("reasoningId", withError),
  "reasoning.cancelled": withId("reasoningId", withReason),
  "tool.requested": withId("toolCallId", (p) => first(
    () => reqStr(p, "name"),
    () => optStr(p, "arguments"),
    () => (hasOwn(p, "index") && !Number.isInteger(p.index)
      ? [".index", "must be an integer when present"] : null),
    () => (hasOwn(p, "attempt") && !(Number.isInteger(p.attempt) && p.attempt >= 1)
      ? [".attempt", "must be an integer >= 1 when present"] : null),
    () => optStr(p, "retryOf"),
  )),
  "tool.arguments_delta": withId("toolCallId", stringDelta),
  "tool.running": withId("toolCallId", nothing),
  "tool.completed": withId("toolCallId", nothing),
  "tool.failed": withId("toolCallId", withError),
  "tool.cancelled": withId("toolCallId", withReason),
  "approval.requested": withId("approvalId", (p) => first(
    () => optStr(p, "toolCallId"),
    () => optStr(p, "description"),
    () => optStr(p, "risk"),
    () => optBool(p, "editable"),
    () => optFinite(p, "expiresAt"),
    () => (hasOwn(p, "version") && !(typeof p.version === "string" || isFiniteNumber(p.version))
      ? [".version", "must be a string or a finite number when present"] : null),
  )),
  "approval.resolved": withId("approvalId", (p) =>
    (APPROVAL_DECISIONS.includes(get(p, "decision"))
      ? null : [".decision", "must be one of approved, rejected, modified, expired"])),
  "task.created": withId("taskId", (p) =>
    first(() => reqStr(p, "title"), () => optStr(p, "description"))),
  "task.updated": withId("taskId", (p) => first(
    () => optStr(p, "title"), () => optStr(p, "description"), () => optFinite(p, "progress"))),
  "task.completed": withId("taskId", nothing),
  "task.failed": withId("taskId", withError),
  "task.cancelled": withId("taskId", withReason),
  "artifact.created": withId("artifactId", (p) =>
    first(() => reqStr(p, "name"), () => optStr(p, "mediaType"))),
  "artifact.updated": withId("artifactId", (p) =>
    (hasOwn(p, "content") ? null : [".content", "is required"])),
  "artifact.completed": withId("artifactId", nothing),
  "artifact.failed": withId("artifactId", withError),
};

/** Why `data` is not a valid AgentEvent (`{ path, reason }`), or null when it is one. */
/** @param {unknown} data @returns {ValidationProblem | null} */
export function validateEvent(data) {
  /** @param {string} path @param {string} reason */
  const problem = (path, reason) => ({ path, reason });
  if (!isObject(data)) return problem("$", "must be an object");
  if (get(data, "protocolVersion") !== PROTOCOL_VERSION) {
    return problem("$.protocolVersion", `must be "${PROTOCOL_VERSION}"`);
  }
  const type = get(data, "type");
  const check = typeof type === "string" && hasOwn(PAYLOAD_CHECKS, type)
    ? PAYLOAD_CHECKS[type] : undefined;
  if (!check) return problem("$.type", "must be one of the 32 AgentEvent types");
  for (const key of ["eventId", "sessionId", "runId"]) {
    if (!isNonEmptyString(get(data, key))) return problem(`$.${key}`, NON_EMPTY);
  }
  const sequence = get(data, "sequence");
  if (!(Number.isInteger(sequence) && sequence >= 0)) {
    return problem("$.sequence", "must be an integer >= 0");
  }
  if (!isFiniteNumber(get(data, "timestamp"))) {
    return problem("$.timestamp", "must be a finite number");
  }
  if (hasOwn(data, "parentId") && typeof data.parentId !== "string") {
    return problem("$.parentId", OPT_STR);
  }
  const payload = get(data, "payload");
  if (!isObject(payload)) return problem("$.payload", "must be an object");
  if (hasOwn(data, "meta") && !isObject(data.meta)) {
    return problem("$.meta", "must be an object when present");
  }
  const found = check(payload);
  return found ? problem(`$.payload${found[0]}`, found[1]) : null;
}

/** True when `data` is a valid AgentEvent. */
/** @param {unknown} data @returns {data is AgentEvent} */
export function isAgentEvent(data) {
  return validateEvent(data) === null;
}

// ---------------------------------------------------------------------------------------------
// State (protocol.md §3)

/** An empty AgentState. */
/** @returns {AgentState} */
export function createInitialAgentState() {
  return {
    sessions: {}, runs: {}, messages: {}, reasoning: {}, toolCalls: {}, approvals: {},
    tasks: {}, artifacts: {}, order: [], issues: [], processedEventIds: {}, lastSequenceByRun: {},
  };
}

// Issue texts, as the reference reducer words them.
/**
 * @type {{
 *   sequence: (sequence: number, last: number, runId: string) => string,
 *   sessionMismatch: (runId: string, runSession: string, eventSession: string) => string,
 *   runNotRunning: (runId: string, status: string) => string,
 *   missingRun: (runId: string, type: string) => string,
 *   duplicateSession: (sessionId: string) => string,
 *   duplicateRun: (runId: string) => string,
 *   duplicateEntity: (kind: EntityKind, id: string) => string,
 *   missingEntity: (kind: EntityKind, id: string) => string,
 *   terminalEntity: (kind: EntityKind, id: string, status: string) => string,
 * }}
 */
const issueText = {
  sequence: (sequence, last, runId) =>
    `Sequence ${sequence} must be greater than ${last} for run "${runId}".`,
  sessionMismatch: (runId, runSession, eventSession) =>
    `Run "${runId}" belongs to session "${runSession}", not "${eventSession}".`,
  runNotRunning: (runId, status) => `Run "${runId}" is already ${status}.`,
  missingRun: (runId, type) => `Run "${runId}" must be started before "${type}".`,
  duplicateSession: (sessionId) => `Session "${sessionId}" already exists.`,
  duplicateRun: (runId) => `Run "${runId}" already exists.`,
  duplicateEntity: (kind, id) => `${KINDS[kind][2]} "${id}" already exists.`,
  missingEntity: (kind, id) => `${KINDS[kind][2]} "${id}" does not exist.`,
  terminalEntity: (kind, id, status) => (kind === "approval"
    ? `Approval "${id}" is already resolved.`
    : `${KINDS[kind][2]} "${id}" is already ${status}.`),
};

// `record[key] = source[key]`, where an absent source key means "no key".
/** @param {Json} record @param {Json} source @param {string} key */
function copyOpt(record, source, key) {
  if (hasOwn(source, key)) record[key] = source[key];
  else delete record[key];
}

// `record[key] = source[key] ?? record[key]`.
/** @param {Json} record @param {Json} source @param {string} key */
function coalesce(record, source, key) {
  const value = get(source, key);
  if (value !== undefined && value !== null) record[key] = value;
}

/** @param {EntityKind} kind @param {string} id @param {Json} event @returns {Json} */
function startEntity(kind, id, event) {
  const p = event.payload;
  /** @type {Json} */
  const record = { id, runId: event.runId };
  if (hasOwn(event, "parentId")) record.parentId = event.parentId;
  let status = "streaming";
  if (kind === "message") {
    record.role = p.role;
    record.content = get(p, "content") ?? "";
  } else if (kind === "reasoning") {
    record.content = "";
    record.redacted = get(p, "redacted") ?? false;
  } else if (kind === "tool") {
    record.name = p.name;
    record.arguments = get(p, "arguments") ?? "";
    copyOpt(record, p, "index");
    record.attempt = get(p, "attempt") ?? 1;
    copyOpt(record, p, "retryOf");
    status = "pending";
  } else if (kind === "approval") {
    for (const key of ["toolCallId", "description", "risk", "data", "editable", "expiresAt",
      "version"]) copyOpt(record, p, key);
    status = "waiting";
  } else if (kind === "task") {
    record.title = p.title;
    copyOpt(record, p, "description");
    status = "pending";
  } else {
    record.name = p.name;
    copyOpt(record, p, "mediaType");
    copyOpt(record, p, "content");
  }
  record.status = status;
  record.createdAt = event.timestamp;
  record.updatedAt = event.timestamp;
  if (hasOwn(event, "meta")) record.meta = event.meta;
  return record;
}

/** `appendMessageContent`: strings concatenate, otherwise both become part lists. */
/** @param {MessageContent} content @param {MessageContent} delta @returns {MessageContent} */
export function appendContent(content, delta) {
  if (typeof content === "string" && typeof delta === "string") return content + delta;
  /** @param {MessageContent} v */
  const parts = (v) => (typeof v === "string" ? [{ type: "text", text: v }] : [...v]);
  return [...parts(content), ...parts(delta)];
}

/** @param {Json} entity @param {Json} event @returns {Json} */
function followUp(entity, event) {
  const p = event.payload;
  const dot = event.type.indexOf(".");
  const family = event.type.slice(0, dot);
  const action = event.type.slice(dot + 1);
  const r = { ...entity };
  if (action === "failed") {
    r.error = p.error;
    r.status = "failed";
  } else if (action === "cancelled") {
    copyOpt(r, p, "reason");
    r.status = "cancelled";
  } else if (family === "message") {
    if (action === "delta") r.content = appendContent(r.content, p.delta);
    else { coalesce(r, p, "content"); r.status = "completed"; }
  } else if (family === "reasoning") {
    if (action === "delta") r.content += p.delta;
    else { coalesce(r, p, "content"); copyOpt(r, p, "summary"); r.status = "completed"; }
  } else if (family === "tool") {
    if (action === "arguments_delta") r.arguments += p.delta;
    else if (action === "running") r.status = "running";
    else { copyOpt(r, p, "result"); r.status = "completed"; }
  } else if (family === "approval") {
    r.decision = p.decision;
    coalesce(r, p, "data");
    r.status = "completed";
  } else if (family === "task") {
    if (action === "updated") {
      coalesce(r, p, "title");
      coalesce(r, p, "description");
      coalesce(r, p, "progress");
      r.status = "running";
    } else { copyOpt(r, p, "result"); r.status = "completed"; }
  } else if (action === "updated") { // artifact
    r.content = p.content;
    coalesce(r, p, "version");
  } else {
    coalesce(r, p, "content");
    coalesce(r, p, "version");
    r.status = "completed";
  }
  r.updatedAt = event.timestamp;
  return r;
}

/** @param {IssueCode} code @param {Json} event @param {string} message @returns {AgentProtocolIssue} */
function issue(code, event, message) {
  return { code, eventId: event.eventId, runId: event.runId, message };
}

/** @param {AgentState} state @param {Json} event */
function requireRun(state, event) {
  return hasOwn(state.runs, event.runId)
    ? null : issue("missing_run", event, issueText.missingRun(event.runId, event.type));
}

// The decision for one valid, not yet processed event: `{ issue }` or `{ patch }` (the state
// keys it replaces, copied with the change; the processed-event ledger is left to the caller).
/**
 * @param {AgentState} state
 * @param {Json} event
 * @returns {{ issue?: AgentProtocolIssue, patch?: Json }}
 */
function decide(state, event) {
  const { runId, type } = event;
  const last = get(state.lastSequenceByRun, runId);
  if (last !== undefined && event.sequence <= last) {
    return { issue: issue("invalid_sequence", event, issueText.sequence(event.sequence, last, runId)) };
  }
  const current = get(state.runs, runId);
  if (current !== undefined) {
    if (current.sessionId !== event.sessionId && type !== "session.started") {
      return { issue: issue("invalid_transition", event,
        issueText.sessionMismatch(runId, current.sessionId, event.sessionId)) };
    }
    if (current.status !== "running" && type !== "session.started" && type !== "run.started") {
      return { issue: issue("invalid_transition", event,
        issueText.runNotRunning(runId, current.status)) };
    }
  }
  const p = event.payload;
  const ts = event.timestamp;

  if (type === "session.started") {
    const { sessionId } = event;
    if (hasOwn(state.sessions, sessionId)) {
      return { issue: issue("duplicate_entity", event, issueText.duplicateSession(sessionId)) };
    }
    /** @type {Json} */
    const session = { id: sessionId };
    if (hasOwn(p, "title")) session.title = p.title;
    session.createdAt = ts;
    return { patch: { sessions: { ...state.sessions, [sessionId]: session } } };
  }
  if (type === "run.started") {
    if (current !== undefined) {
      return { issue: issue("duplicate_entity", event, issueText.duplicateRun(runId)) };
    }
    /** @type {Json} */
    const run = { id: runId, sessionId: event.sessionId, status: "running" };
    if (hasOwn(p, "input")) run.input = p.input;
    run.createdAt = ts;
    run.updatedAt = ts;
    return { patch: { runs: { ...state.runs, [runId]: run } } };
  }
  if (RUN_TERMINAL_TYPES.has(type)) {
    const missing = requireRun(state, event);
    if (missing) return { issue: missing };
    const ended = { ...current, status: type.slice(4) };
    /** @type {Record<string, string[]>} */
    const ownedBy = { "run.completed": ["output", "usage"], "run.failed": ["error"],
      "run.cancelled": ["reason"] };
    const owned = ownedBy[type];
    for (const field of owned) copyOpt(ended, p, field);
    ended.updatedAt = ts;
    return { patch: { runs: { ...state.runs, [runId]: ended } } };
  }

  const startKind = get(START_TYPES, type);
  const kind = /** @type {EntityKind} */ (startKind ?? type.slice(0, type.indexOf(".")));
  const [mapName, idField] = KINDS[kind];
  const id = p[idField];
  const key = entityKey(runId, id);
  const entities = state[mapName];

  if (startKind !== undefined) {
    const missing = requireRun(state, event);
    if (missing) return { issue: missing };
    if (hasOwn(entities, key)) {
      return { issue: issue("duplicate_entity", event, issueText.duplicateEntity(kind, id)) };
    }
    return { patch: {
      [mapName]: { ...entities, [key]: startEntity(kind, id, event) },
      order: [...state.order, { kind, id, runId }],
    } };
  }
  const entity = get(entities, key);
  if (entity === undefined) {
    return { issue: issue("missing_entity", event, issueText.missingEntity(kind, id)) };
  }
  if (TERMINAL.has(entity.status)) {
    return { issue: issue("invalid_transition", event,
      issueText.terminalEntity(kind, id, entity.status)) };
  }
  return { patch: { [mapName]: { ...entities, [key]: followUp(entity, event) } } };
}

/**
 * Fold one event into `state` and return the next state; `state` is never mutated.
 * An invalid or already processed event returns the very same `state` object.
 */
/**
 * @param {AgentState} state
 * @param {any} event anything: checked by validateEvent first
 * @returns {AgentState}
 */
export function reduceAgentState(state, event) {
  if (validateEvent(event) !== null) return state;
  const ekey = eventKey(event.runId, event.eventId);
  if (hasOwn(state.processedEventIds, ekey)) return state;
  const { issue: problem, patch } = decide(state, event);
  /** @type {AgentState} */
  const next = { ...state, ...patch, processedEventIds: { ...state.processedEventIds, [ekey]: true } };
  if (problem) next.issues = [...state.issues, problem];
  else next.lastSequenceByRun = { ...state.lastSequenceByRun, [event.runId]: event.sequence };
  return next;
}

/**
 * Fold one event for a long-lived client: like `reduceAgentState`, but the event ledgers
 * (`processedEventIds`, `lastSequenceByRun`) are extended in place, so an event costs O(1)
 * there instead of a copy of the whole history. Returns `{ state, outcome }`, outcome one of
 * "invalid", "duplicate", "accepted" or the issue the event raised; a new state object
 * whenever the event was folded.
 */
/**
 * @param {AgentState} state
 * @param {any} event anything: checked by validateEvent first
 * @returns {{ state: AgentState, outcome: ApplyOutcome }}
 */
export function applyAgentEvent(state, event) {
  if (validateEvent(event) !== null) return { state, outcome: "invalid" };
  const ekey = eventKey(event.runId, event.eventId);
  if (hasOwn(state.processedEventIds, ekey)) return { state, outcome: "duplicate" };
  const { issue: problem, patch } = decide(state, event);
  const next = { ...state, ...patch };
  setOwn(next.processedEventIds, ekey, true);
  if (problem) {
    next.issues = [...state.issues, problem];
    return { state: next, outcome: problem };
  }
  setOwn(next.lastSequenceByRun, event.runId, event.sequence);
  return { state: next, outcome: "accepted" };
}

// ---------------------------------------------------------------------------------------------
// Projection (protocol.md §8)

/** useXChat status of one message: error, abort, local, success or updating. */
/** @param {MessageState} message @returns {import("./agent-reducer.js").MessageStatus} */
export function messageStatus(message) {
  if (message.status === "failed") return "error";
  if (message.status === "cancelled") return "abort";
  if (message.role === "user") return "local";
  if (message.status === "completed") return "success";
  return "updating";
}

/** `[{ id: entityKey(runId, id), message, status }]` for every message, in `order`. */
/** @param {AgentState} state */
export function projectMessages(state) {
  /** @type {ProjectedMessage[]} */
  const out = [];
  for (const ref of state.order) {
    if (ref.kind !== "message") continue;
    const key = entityKey(ref.runId, ref.id);
    const message = get(state.messages, key);
    if (message === undefined) continue;
    out.push({ id: key, message, status: messageStatus(message) });
  }
  return out;
}

/** True while any run is `running`. */
/** @param {AgentState} state */
export function isRequesting(state) {
  return Object.values(state.runs).some((run) => run.status === "running");
}
