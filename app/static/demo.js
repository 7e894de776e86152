// The demo page: renders the GatewayClient's state. Plain DOM, no framework, nothing fetched
// but the gateway's own API.
import { createGatewayClient, entityKey } from "./client/gateway-client.js";

const $ = (id) => document.getElementById(id);
const KEY_RE = /^[A-Za-z0-9._:-]{1,128}$/;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function text(node, value) {
  const s = value ?? "";
  if (node.textContent !== s) node.textContent = s;
}

function pretty(value) {
  if (value === undefined) return "";
  if (typeof value === "string") {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch { return value; }
  }
  return JSON.stringify(value, null, 2);
}

function contentText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => {
    if (part.type === "text") return part.text ?? "";
    if (part.type === "image") return `[image${part.mediaType ? ` ${part.mediaType}` : ""}]`;
    if (part.type === "file") return `[file ${part.name ?? ""}]`;
    return `[${part.type}]`;
  }).join("");
}

// -- setup ------------------------------------------------------------------------------------

const params = new URLSearchParams(location.search);
const urlKey = params.get("c");
const initialKey = urlKey && KEY_RE.test(urlKey) ? urlKey : `demo-${Math.random().toString(36).slice(2, 8)}`;
const client = createGatewayClient({
  conversationKey: initialKey,
  transport: params.get("transport") === "ws" ? "ws" : "sse",
  accessToken: params.get("access_token"),
});
window.gatewayDebug = {
  client,
  killConnection: () => client.debugKillConnection(),
};

// The conversation key lives in the URL (?c=), so a page reload shows the same conversation.
function keepKeyInUrl(key) {
  const url = new URL(location.href);
  if (url.searchParams.get("c") === key) return;
  url.searchParams.set("c", key);
  history.replaceState(null, "", url);
}
keepKeyInUrl(initialKey);

// While the key field holds an invalid key, nothing is sent (not even to the previous key).
let keyValid = true;
const KEY_HINT = "conversation key: 1–128 of A–Z a–z 0–9 . _ : -";
const keyInput = $("conversation");
keyInput.value = initialKey;
function checkKey() {
  keyValid = KEY_RE.test(keyInput.value.trim());
  keyInput.setAttribute("aria-invalid", String(!keyValid));
  for (const id of ["send", "reload"]) $(id).disabled = !keyValid;
  if (!keyValid) showError(KEY_HINT);
  else if ($("error").textContent === KEY_HINT) showError(null);
  return keyValid;
}
keyInput.addEventListener("input", checkKey);
keyInput.addEventListener("change", () => {
  if (!checkKey()) return;
  const key = keyInput.value.trim();
  if (key === client.conversationKey) return;
  resetTimeline();
  client.setConversation(key);
  keepKeyInUrl(key);
});

const providerSelect = $("provider");
providerSelect.addEventListener("change", () => { client.provider = providerSelect.value; });

const transportSelect = $("transport");
transportSelect.value = client.transport;
transportSelect.addEventListener("change", () => client.setTransport(transportSelect.value));

$("kill").addEventListener("click", () => client.debugKillConnection());
$("stop").addEventListener("click", () => act(() => client.abort()));
$("reload").addEventListener("click", () => { if (checkKey()) act(() => client.onReload()); });
$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  if (!checkKey()) return;
  const prompt = $("prompt").value.trim();
  if (!prompt) return;
  $("prompt").value = "";
  act(() => client.onRequest({ prompt }));
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
});

async function act(fn) {
  showError(null);
  try { await fn(); } catch (err) { showError(`${err.code ?? "error"}: ${err.message}`); }
}

function showError(message) {
  const box = $("error");
  box.hidden = !message;
  text(box, message ?? "");
}

async function loadProviders() {
  try {
    const providers = await client.providers();
    providerSelect.replaceChildren(...providers.map((p) =>
      el("option", { value: p.name, selected: p.default || undefined }, `${p.name} (${p.kind})`)));
    client.provider = providerSelect.value || null;
  } catch (err) {
    showError(`providers: ${err.message}`);
  }
}

// -- rendering --------------------------------------------------------------------------------

const timeline = $("timeline");
const runViews = new Map(); // runId -> {section, status, body}
const entityViews = new Map(); // kind:entityKey -> {node, entity, update}
let renderedSnapshots = -1;
let scheduled = false;

function resetTimeline() {
  for (const { section } of runViews.values()) section.remove();
  runViews.clear();
  entityViews.clear();
}

function schedule() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => { scheduled = false; render(); });
}

function runView(run) {
  let view = runViews.get(run.id);
  if (!view) {
    const status = el("span", { class: "status", "data-testid": "run-badge" });
    const body = el("div", { class: "run-body" });
    const reason = el("div", { class: "run-error", "data-testid": "run-error", hidden: true });
    const section = el("section", { class: "run", "data-run-id": run.id },
      el("div", { class: "run-head" }, el("span", { class: "run-id" }, run.id), status), body,
      reason);
    timeline.append(section);
    view = { section, status, body, reason };
    runViews.set(run.id, view);
  }
  text(view.status, run.status);
  view.status.dataset.status = run.status;
  view.section.dataset.status = run.status;
  // Why the run ended, when it did not complete: run.failed's error, run.cancelled's reason.
  const why = run.status === "failed" && run.error
    ? `Run failed${run.error.code ? ` (${run.error.code})` : ""}: ${run.error.message}`
    : run.status === "cancelled" ? `Run cancelled${run.reason ? `: ${run.reason}` : ""}` : "";
  text(view.reason, why);
  view.reason.hidden = !why;
  return view;
}

const BUILDERS = { message: buildMessage, reasoning: buildReasoning, tool: buildTool,
  approval: buildApproval, task: buildTask, artifact: buildArtifact };
const MAPS = { message: "messages", reasoning: "reasoning", tool: "toolCalls",
  approval: "approvals", task: "tasks", artifact: "artifacts" };

function render() {
  const stick = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 80;
  renderState();
  if (stick) timeline.scrollTop = timeline.scrollHeight;
}

function renderState() {
  const state = client.agentState;
  if (client.counters.snapshots !== renderedSnapshots) {
    renderedSnapshots = client.counters.snapshots;
    resetTimeline();
  }
  const runs = Object.values(state.runs).sort((a, b) => a.createdAt - b.createdAt);
  for (const run of runs) runView(run);
  for (const ref of state.order) {
    const key = entityKey(ref.runId, ref.id);
    const entity = state[MAPS[ref.kind]][key];
    if (!entity) continue;
    const viewKey = `${ref.kind}:${key}`;
    let view = entityViews.get(viewKey);
    if (!view) {
      const run = state.runs[ref.runId];
      const parent = run ? runView(run).body : timeline;
      view = BUILDERS[ref.kind](entity);
      view.node.dataset.kind = ref.kind;
      view.node.dataset.id = ref.id;
      parent.append(view.node);
      entityViews.set(viewKey, view);
      view.entity = null;
    }
    if (view.entity !== entity) {
      view.entity = entity;
      view.node.dataset.status = entity.status;
      view.update(entity);
    }
  }
  $("empty").hidden = state.order.length > 0 || runs.length > 0;

  const last = client.lastRun;
  text($("run-status"), last ? last.status : "idle");
  $("run-status").dataset.status = last ? last.status : "idle";
  text($("issue-count"), String(state.issues.length));
  $("issue-count").parentElement.classList.toggle("warn", state.issues.length > 0);
  const conn = $("connection");
  const labels = { idle: "idle", connecting: "connecting…", open: "live",
    reconnecting: "reconnecting…", resumed: "resumed", closed: "closed" };
  text(conn, `${client.transport.toUpperCase()} · ${labels[client.connection]}`);
  conn.dataset.state = client.connection;
  $("stop").disabled = !client.activeRun || !keyValid;
}

function header(label, entity) {
  const status = el("span", { class: "status" });
  return { node: el("div", { class: "head" }, el("span", { class: "label" }, label), status),
    status, set(e) { text(status, e.status); status.dataset.status = e.status; } };
}

function errorLine(entity) {
  if (entity.error) return `${entity.error.code ? `${entity.error.code}: ` : ""}${entity.error.message}`;
  if (entity.reason) return `cancelled: ${entity.reason}`;
  return "";
}

function buildMessage(entity) {
  const body = el("div", { class: "content", "data-testid": "message-content" });
  const err = el("div", { class: "entity-error" });
  const head = header(entity.role, entity);
  const node = el("article", { class: `entity message role-${entity.role}`,
    "data-role": entity.role }, head.node, body, err);
  return { node, update(e) {
    head.set(e);
    text(body, contentText(e.content));
    text(err, errorLine(e));
  } };
}

function buildReasoning(entity) {
  const label = el("span");
  const status = el("span", { class: "status" });
  const content = el("pre", { class: "reasoning-text" });
  const summary = el("div", { class: "summary" });
  const node = el("details", { class: "entity reasoning", "data-testid": "reasoning" },
    el("summary", {}, label, status), content, summary);
  return { node, update(e) {
    text(label, e.redacted ? "Reasoning (redacted) " : "Reasoning ");
    text(status, e.status);
    status.dataset.status = e.status;
    text(content, e.content);
    text(summary, e.summary ? `Summary: ${e.summary}` : "");
  } };
}

/** A server tool (MCP) runs on the gateway: its label names the server. */
function toolLabel(entity) {
  const meta = entity.meta || {};
  return meta.executor === "gateway" && meta.server
    ? `tool · ${entity.name} · server ${meta.server}` : `tool · ${entity.name}`;
}

function buildTool(entity) {
  const head = header(toolLabel(entity), entity);
  const args = el("pre", { class: "args", "data-testid": "tool-args" });
  const result = el("pre", { class: "result", "data-testid": "tool-result" });
  const err = el("div", { class: "entity-error" });
  const input = el("textarea", { rows: 2, "data-testid": "tool-result-input", spellcheck: "false" });
  input.value = '{"ok": true}';
  const isError = el("input", { type: "checkbox" });
  const form = el("form", { class: "tool-form", "data-testid": "tool-result-form", hidden: true },
    el("label", {}, "Result of this app-executed tool (JSON or text)"), input,
    el("div", { class: "actions" },
      el("label", { class: "check" }, isError, " is error"),
      el("button", { type: "submit", "data-testid": "tool-result-submit" }, "Submit result")));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    let value = input.value;
    try { value = JSON.parse(value); } catch { /* plain text result */ }
    form.querySelector("button").disabled = true;
    act(() => client.submitToolResult(entity.id, value, isError.checked))
      .finally(() => { form.querySelector("button").disabled = false; });
  });
  const node = el("article", { class: "entity tool", "data-testid": "tool",
    "data-server": (entity.meta && entity.meta.server) || "" }, head.node,
    el("div", { class: "kv" }, "arguments"), args, form, result, err);
  return { node, update(e) {
    head.set(e);
    text(args, pretty(e.arguments));
    text(result, e.result === undefined ? "" : `result: ${pretty(e.result)}`);
    text(err, errorLine(e));
    const executor = e.meta && e.meta.executor;
    form.hidden = !(executor === "app" && e.status === "running");
  } };
}

function buildApproval(entity) {
  const head = header("approval", entity);
  const desc = el("div", { class: "desc" });
  const risk = el("span", { class: "risk" });
  const data = el("pre", { class: "data" });
  const decision = el("div", { class: "decision", "data-testid": "approval-decision" });
  const server = el("div", { class: "kv", "data-testid": "approval-server" });
  // Editable approvals (a server tool's arguments): edit the JSON, then "Approve with edits".
  const editor = el("textarea", { rows: 4, class: "args-editor", spellcheck: "false",
    "data-testid": "approval-editor", hidden: true });
  let current = entity;
  const decide = (d) => (ev) => {
    let edited;
    if (d === "modified") {
      try { edited = JSON.parse(editor.value); } catch (err) {
        showError(`invalid JSON: ${err.message}`);
        return;
      }
    }
    ev.target.disabled = true;
    // expectedVersion: the decision holds only for the call shown (409 otherwise)
    act(() => client.approve(entity.id, d, edited, current.version))
      .finally(() => { ev.target.disabled = false; });
  };
  const withEdits = el("button", { type: "button", "data-testid": "approve-modified",
    onclick: decide("modified"), hidden: true }, "Approve with edits");
  const buttons = el("div", { class: "actions" },
    el("button", { type: "button", "data-testid": "approve", onclick: decide("approved") }, "Approve"),
    withEdits,
    el("button", { type: "button", class: "danger", "data-testid": "reject",
      onclick: decide("rejected") }, "Reject"));
  const node = el("article", { class: "entity approval", "data-testid": "approval" },
    head.node, desc, server, risk, data, editor, decision, buttons);
  let edited = false;
  editor.addEventListener("input", () => { edited = true; });
  return { node, update(e) {
    current = e;
    head.set(e);
    const meta = e.meta || {};
    text(server, meta.executor === "gateway" ? `server ${meta.server} · tool ${meta.tool}` : "");
    const editable = e.editable === true && e.status === "waiting";
    editor.hidden = !editable;
    withEdits.hidden = !editable;
    if (editable && !edited) editor.value = JSON.stringify(e.data ?? {}, null, 2);
    text(desc, e.description ?? "");
    text(risk, e.risk ? `risk: ${e.risk}` : "");
    risk.dataset.risk = e.risk ?? "";
    text(data, e.data === undefined ? "" : pretty(e.data));
    text(decision, e.decision ? `decision: ${e.decision}` : "");
    buttons.hidden = e.status !== "waiting";
  } };
}

function buildTask(entity) {
  const head = header("task", entity);
  const title = el("div", { class: "title" });
  const desc = el("div", { class: "desc" });
  const bar = el("progress", { max: 100, "data-testid": "task-progress" });
  const pct = el("span", { class: "pct" });
  const err = el("div", { class: "entity-error" });
  const node = el("article", { class: "entity task", "data-testid": "task" },
    head.node, title, desc, el("div", { class: "progress" }, bar, pct), err);
  return { node, update(e) {
    head.set(e);
    text(title, e.title);
    text(desc, e.description ?? "");
    let value = e.progress;
    if (value === undefined && e.status === "completed") value = 1;
    if (value === undefined) { bar.removeAttribute("value"); text(pct, ""); }
    else {
      const percent = value <= 1 ? value * 100 : value;
      bar.value = percent;
      text(pct, `${Math.round(percent)}%`);
    }
    text(err, errorLine(e));
  } };
}

function buildArtifact(entity) {
  const head = header(`artifact · ${entity.name}`, entity);
  const meta = el("div", { class: "kv" });
  const content = el("pre", { class: "artifact-content", "data-testid": "artifact-content" });
  const err = el("div", { class: "entity-error" });
  const node = el("article", { class: "entity artifact", "data-testid": "artifact" },
    head.node, meta, content, err);
  return { node, update(e) {
    head.set(e);
    text(meta, [e.mediaType, e.version !== undefined ? `v${e.version}` : null]
      .filter(Boolean).join(" · "));
    text(content, typeof e.content === "string" ? e.content : pretty(e.content));
    text(err, errorLine(e));
  } };
}

client.subscribe(schedule);
loadProviders().finally(() => client.connect());
render();
