// Conformance cases (docs/spec/conformance-cases.md): "Event factory" 3 (validity),
// "Reducer" 1–8 and "Message projection", against both folds of agent-reducer.js.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  applyAgentEvent,
  createInitialAgentState,
  entityKey,
  isAgentEvent,
  projectMessages,
  reduceAgentState,
  validateEvent,
} from "../src/agent-reducer.js";
import { FOLDS, eventFactory, foldPure } from "./support.js";

const fullLifecycle = () => {
  const e = eventFactory("session-1", "run-1", () => 10);
  return [
    e.create("run.started", { input: { prompt: "hello" } }),
    e.create("message.started", { messageId: "message-1", role: "assistant" }),
    e.create("message.delta", { messageId: "message-1", delta: "hel" }),
    e.create("message.delta", { messageId: "message-1", delta: "lo" }),
    e.create("message.completed", { messageId: "message-1" }),
    e.create("reasoning.started", { reasoningId: "reasoning-1" }),
    e.create("reasoning.delta", { reasoningId: "reasoning-1", delta: "check" }),
    e.create("reasoning.completed", { reasoningId: "reasoning-1", summary: "checked" }),
    e.create("tool.requested", { toolCallId: "tool-1", name: "search", arguments: '{"q":' }),
    e.create("tool.arguments_delta", { toolCallId: "tool-1", delta: '"x"}' }),
    e.create("tool.running", { toolCallId: "tool-1" }),
    e.create("tool.completed", { toolCallId: "tool-1", result: ["result"] }),
    e.create("approval.requested", { approvalId: "approval-1", toolCallId: "tool-1", risk: "high" }),
    e.create("approval.resolved", { approvalId: "approval-1", decision: "approved" }),
    e.create("task.created", { taskId: "task-1", title: "Analyze" }),
    e.create("task.updated", { taskId: "task-1", progress: 50 }),
    e.create("task.completed", { taskId: "task-1", result: "done" }),
    e.create("artifact.created", { artifactId: "artifact-1", name: "report.md", content: "draft" }),
    e.create("artifact.updated", { artifactId: "artifact-1", content: "final", version: 2 }),
    e.create("artifact.completed", { artifactId: "artifact-1" }),
    e.create("run.completed", { output: "ok", usage: { inputTokens: 10 } }),
  ];
};

describe("event validity (event factory case 3)", () => {
  test("a bare type, an empty message.started payload and an unknown type are invalid", () => {
    const e = eventFactory("s", "r");
    assert.equal(isAgentEvent({ type: "run.started" }), false);
    assert.deepEqual(validateEvent(e.create("message.started", {})),
      { path: "$.payload.messageId", reason: "must be a non-empty string" });
    assert.deepEqual(validateEvent(e.create("unknown.event", {})),
      { path: "$.type", reason: "must be one of the 32 AgentEvent types" });
    assert.deepEqual(validateEvent({ ...e.create("run.started", {}), sequence: -1 }),
      { path: "$.sequence", reason: "must be an integer >= 0" });
    assert.equal(validateEvent(e.create("message.started", { messageId: "m", role: "user" })), null);
  });

  test("an invalid event is ignored: the very same state comes back", () => {
    const state = createInitialAgentState();
    assert.equal(reduceAgentState(state, { type: "run.started" }), state);
    assert.deepEqual(applyAgentEvent(state, null), { state, outcome: "invalid" });
  });
});

for (const [name, fold] of Object.entries(FOLDS)) {
  describe(`reducer conformance (${name} fold)`, () => {
    test("1 full lifecycle", () => {
      const state = fold(fullLifecycle());
      assert.deepEqual(state.issues, []);
      const key = "5:run-1";
      assert.deepEqual(state.runs, { "run-1": {
        id: "run-1", sessionId: "session-1", status: "completed", input: { prompt: "hello" },
        createdAt: 10, updatedAt: 10, output: "ok", usage: { inputTokens: 10 } } });
      assert.deepEqual(state.messages, { [`${key}message-1`]: {
        id: "message-1", runId: "run-1", role: "assistant", content: "hello",
        status: "completed", createdAt: 10, updatedAt: 10 } });
      assert.deepEqual(state.reasoning[`${key}reasoning-1`], {
        id: "reasoning-1", runId: "run-1", content: "check", redacted: false,
        status: "completed", createdAt: 10, updatedAt: 10, summary: "checked" });
      assert.deepEqual(state.toolCalls[`${key}tool-1`], {
        id: "tool-1", runId: "run-1", name: "search", arguments: '{"q":"x"}', attempt: 1,
        status: "completed", createdAt: 10, updatedAt: 10, result: ["result"] });
      assert.deepEqual(state.approvals[`${key}approval-1`], {
        id: "approval-1", runId: "run-1", toolCallId: "tool-1", risk: "high",
        status: "completed", createdAt: 10, updatedAt: 10, decision: "approved" });
      assert.deepEqual(state.tasks[`${key}task-1`], {
        id: "task-1", runId: "run-1", title: "Analyze", status: "completed", createdAt: 10,
        updatedAt: 10, progress: 50, result: "done" });
      assert.deepEqual(state.artifacts[`${key}artifact-1`], {
        id: "artifact-1", runId: "run-1", name: "report.md", content: "final",
        status: "completed", createdAt: 10, updatedAt: 10, version: 2 });
      assert.deepEqual(state.order.map((r) => `${r.kind}:${r.id}`), [
        "message:message-1", "reasoning:reasoning-1", "tool:tool-1", "approval:approval-1",
        "task:task-1", "artifact:artifact-1"]);
      assert.deepEqual(state.lastSequenceByRun, { "run-1": 20 });
      assert.deepEqual(Object.keys(state.processedEventIds),
        fullLifecycle().map((e, i) => `${key}run-1:${i}:${e.type}`));
      assert.deepEqual(JSON.parse(JSON.stringify(state)), state);
    });

    test("3 the same eventId in two runs creates both", () => {
      const state = fold([
        eventFactory("s", "first").create("run.started", {}, { eventId: "shared-event" }),
        eventFactory("s", "second").create("run.started", {}, { eventId: "shared-event" }),
      ]);
      assert.deepEqual(Object.keys(state.runs), ["first", "second"]);
      assert.deepEqual(state.issues, []);
    });

    test("4 the same messageId in two runs stays separate; string then parts", () => {
      const first = eventFactory("s", "first");
      const second = eventFactory("s", "second");
      const image = { type: "image", url: "https://example.com/image.png" };
      const state = fold([
        first.create("run.started", {}),
        first.create("message.started", { messageId: "shared", role: "assistant" }),
        first.create("message.delta", { messageId: "shared", delta: "first" }),
        first.create("message.completed", { messageId: "shared" }),
        first.create("run.completed", {}),
        second.create("run.started", {}),
        second.create("message.started", { messageId: "shared", role: "assistant",
          content: [{ type: "text", text: "second" }] }),
        second.create("message.delta", { messageId: "shared", delta: [image] }),
        second.create("message.completed", { messageId: "shared" }),
        second.create("run.completed", {}),
      ]);
      assert.deepEqual(state.issues, []);
      assert.equal(state.messages[entityKey("first", "shared")].content, "first");
      assert.deepEqual(state.messages[entityKey("second", "shared")].content,
        [{ type: "text", text: "second" }, image]);

      const e = eventFactory("s", "r");
      const mixed = fold([
        e.create("run.started", {}),
        e.create("message.started", { messageId: "m", role: "assistant" }),
        e.create("message.delta", { messageId: "m", delta: "he" }),
        e.create("message.delta", { messageId: "m", delta: "llo" }),
        e.create("message.delta", { messageId: "m", delta: [{ type: "image", url: "u" }] }),
        e.create("message.delta", { messageId: "m", delta: "tail" }),
      ]);
      assert.deepEqual(mixed.messages[entityKey("r", "m")].content, [
        { type: "text", text: "hello" }, { type: "image", url: "u" }, { type: "text", text: "tail" }]);
    });

    test("5 orphan, out-of-order and post-terminal events raise issues", () => {
      const e = eventFactory("s", "r");
      const state = fold([
        e.create("message.delta", { messageId: "missing", delta: "x" }),
        e.create("run.started", {}),
        e.create("run.completed", {}),
        e.create("message.started", { messageId: "late", role: "assistant" }),
        e.create("task.created", { taskId: "old", title: "old" }, { sequence: 1 }),
      ]);
      assert.deepEqual(state.issues, [
        { code: "missing_entity", eventId: "r:0:message.delta", runId: "r",
          message: 'Message "missing" does not exist.' },
        { code: "invalid_transition", eventId: "r:3:message.started", runId: "r",
          message: 'Run "r" is already completed.' },
        { code: "invalid_sequence", eventId: "r:1:task.created", runId: "r",
          message: 'Sequence 1 must be greater than 2 for run "r".' },
      ]);
      assert.equal(entityKey("r", "late") in state.messages, false);
      assert.deepEqual(state.lastSequenceByRun, { r: 2 }); // a rejected event does not move it
      assert.equal(Object.keys(state.processedEventIds).length, 5);
    });

    test("6 every family accepts its failed and cancelled terminals", () => {
      const f = eventFactory("s", "failed");
      const error = { code: "offline", message: "offline", retryable: true };
      const failed = fold([
        f.create("run.started", {}),
        f.create("message.started", { messageId: "mf", role: "assistant" }),
        f.create("message.failed", { messageId: "mf", error }),
        f.create("reasoning.started", { reasoningId: "rf", redacted: true }),
        f.create("reasoning.failed", { reasoningId: "rf", error }),
        f.create("tool.requested", { toolCallId: "tf", name: "tool" }),
        f.create("tool.failed", { toolCallId: "tf", error }),
        f.create("task.created", { taskId: "taskf", title: "Task" }),
        f.create("task.failed", { taskId: "taskf", error }),
        f.create("artifact.created", { artifactId: "af", name: "file" }),
        f.create("artifact.failed", { artifactId: "af", error }),
        f.create("run.failed", { error }),
      ]);
      assert.deepEqual(failed.issues, []);
      for (const [map, id] of [["messages", "mf"], ["reasoning", "rf"], ["toolCalls", "tf"],
        ["tasks", "taskf"], ["artifacts", "af"]]) {
        const entity = failed[map][entityKey("failed", id)];
        assert.equal(entity.status, "failed");
        assert.deepEqual(entity.error, error);
      }
      assert.equal(failed.reasoning[entityKey("failed", "rf")].redacted, true);
      assert.equal(failed.runs.failed.status, "failed");
      assert.deepEqual(failed.runs.failed.error, error);

      const c = eventFactory("s", "cancelled");
      const cancelled = fold([
        c.create("run.started", {}),
        c.create("message.started", { messageId: "mc", role: "assistant" }),
        c.create("message.cancelled", { messageId: "mc", reason: "stop" }),
        c.create("reasoning.started", { reasoningId: "rc" }),
        c.create("reasoning.cancelled", { reasoningId: "rc", reason: "stop" }),
        c.create("tool.requested", { toolCallId: "tc", name: "tool" }),
        c.create("tool.cancelled", { toolCallId: "tc", reason: "stop" }),
        c.create("task.created", { taskId: "taskc", title: "Task" }),
        c.create("task.cancelled", { taskId: "taskc", reason: "stop" }),
        c.create("run.cancelled", { reason: "stop" }),
      ]);
      assert.deepEqual(cancelled.issues, []);
      for (const [map, id] of [["messages", "mc"], ["reasoning", "rc"], ["toolCalls", "tc"],
        ["tasks", "taskc"]]) {
        const entity = cancelled[map][entityKey("cancelled", id)];
        assert.equal(entity.status, "cancelled");
        assert.equal(entity.reason, "stop");
      }
      assert.equal(cancelled.runs.cancelled.status, "cancelled");
      assert.equal(cancelled.runs.cancelled.reason, "stop");
    });

    test("7 duplicate starts and updates after a terminal", () => {
      const e = eventFactory("s", "r");
      const state = fold([
        e.create("session.started", { title: "Session" }),
        e.create("session.started", {}),
        e.create("run.started", {}),
        e.create("run.started", {}),
        e.create("message.started", { messageId: "m", role: "assistant" }),
        e.create("message.started", { messageId: "m", role: "assistant" }),
        e.create("message.completed", { messageId: "m", content: "final" }),
        e.create("message.failed", { messageId: "m", error: { message: "failed" } }),
        e.create("reasoning.started", { reasoningId: "reason" }),
        e.create("reasoning.started", { reasoningId: "reason" }),
        e.create("reasoning.completed", { reasoningId: "reason", content: "final" }),
        e.create("reasoning.delta", { reasoningId: "reason", delta: "late" }),
        e.create("tool.requested", { toolCallId: "tool", name: "tool" }),
        e.create("tool.requested", { toolCallId: "tool", name: "tool" }),
        e.create("tool.completed", { toolCallId: "tool" }),
        e.create("tool.running", { toolCallId: "tool" }),
        e.create("approval.requested", { approvalId: "approval", data: "original" }),
        e.create("approval.requested", { approvalId: "approval" }),
        e.create("approval.resolved", { approvalId: "approval", decision: "modified" }),
        e.create("approval.resolved", { approvalId: "approval", decision: "approved" }),
        e.create("task.created", { taskId: "task", title: "Task" }),
        e.create("task.created", { taskId: "task", title: "Task" }),
        e.create("task.completed", { taskId: "task" }),
        e.create("task.updated", { taskId: "task", progress: 100 }),
        e.create("artifact.created", { artifactId: "artifact", name: "file" }),
        e.create("artifact.created", { artifactId: "artifact", name: "file" }),
        e.create("artifact.completed", { artifactId: "artifact", content: "final" }),
        e.create("artifact.updated", { artifactId: "artifact", content: "late" }),
      ]);
      const codes = state.issues.map((i) => i.code);
      assert.equal(codes.filter((c) => c === "duplicate_entity").length, 8);
      assert.equal(codes.filter((c) => c === "invalid_transition").length, 6);
      assert.equal(codes.length, 14);
      assert.equal(state.messages[entityKey("r", "m")].content, "final");
      assert.equal(state.approvals[entityKey("r", "approval")].data, "original");
      assert.deepEqual(state.issues.map((i) => i.message), [
        'Session "s" already exists.',
        'Run "r" already exists.',
        'Message "m" already exists.',
        'Message "m" is already completed.',
        'Reasoning "reason" already exists.',
        'Reasoning "reason" is already completed.',
        'Tool call "tool" already exists.',
        'Tool call "tool" is already completed.',
        'Approval "approval" already exists.',
        'Approval "approval" is already resolved.',
        'Task "task" already exists.',
        'Task "task" is already completed.',
        'Artifact "artifact" already exists.',
        'Artifact "artifact" is already completed.',
      ]);
    });

    test("8 missing run and missing entities", () => {
      const noRun = eventFactory("s", "missing-run");
      const state = fold([
        noRun.create("run.completed", {}),
        noRun.create("message.started", { messageId: "m", role: "assistant" }),
        noRun.create("reasoning.started", { reasoningId: "r" }),
        noRun.create("tool.requested", { toolCallId: "tool", name: "tool" }),
        noRun.create("approval.requested", { approvalId: "approval" }),
        noRun.create("task.created", { taskId: "task", title: "Task" }),
        noRun.create("artifact.created", { artifactId: "artifact", name: "file" }),
        noRun.create("run.failed", { error: { message: "x" } }),
        noRun.create("run.cancelled", {}),
      ]);
      assert.deepEqual(state.issues.map((i) => i.code), Array(9).fill("missing_run"));
      assert.equal(state.issues[0].message,
        'Run "missing-run" must be started before "run.completed".');
      assert.deepEqual(state.order, []);

      const e = eventFactory("s", "r");
      const followUps = [
        ["message.delta", { messageId: "missing", delta: "x" }],
        ["message.completed", { messageId: "missing" }],
        ["reasoning.delta", { reasoningId: "missing", delta: "x" }],
        ["tool.arguments_delta", { toolCallId: "missing", delta: "x" }],
        ["tool.running", { toolCallId: "missing" }],
        ["tool.completed", { toolCallId: "missing" }],
        ["approval.resolved", { approvalId: "missing", decision: "rejected" }],
        ["task.updated", { taskId: "missing" }],
        ["task.cancelled", { taskId: "missing" }],
        ["artifact.updated", { artifactId: "missing", content: "x" }],
        ["artifact.completed", { artifactId: "missing" }],
      ];
      const missing = fold([e.create("run.started", {}),
        ...followUps.map(([type, payload]) => e.create(type, payload))]);
      assert.deepEqual(missing.issues.map((i) => i.code),
        Array(followUps.length).fill("missing_entity"));
    });
  });
}

test("2 an already processed event returns the very same state object", () => {
  const event = eventFactory("s", "r").create("run.started", {});
  const state = reduceAgentState(createInitialAgentState(), event);
  assert.equal(reduceAgentState(state, event), state);
  assert.deepEqual(applyAgentEvent(state, event), { state, outcome: "duplicate" });
});

test("the pure fold never mutates its input", () => {
  const events = fullLifecycle();
  const before = createInitialAgentState();
  let state = before;
  const seen = [];
  for (const event of events) {
    seen.push([state, JSON.stringify(state)]);
    state = reduceAgentState(state, event);
  }
  for (const [old, text] of seen) assert.equal(JSON.stringify(old), text);
});

test("applyAgentEvent reports each outcome and returns a new state when it folds", () => {
  const e = eventFactory("s", "r");
  const start = e.create("run.started", {});
  const first = applyAgentEvent(createInitialAgentState(), start);
  assert.equal(first.outcome, "accepted");
  const orphan = applyAgentEvent(first.state, e.create("message.delta", { messageId: "x", delta: "y" }));
  assert.notEqual(orphan.state, first.state);
  assert.equal(orphan.outcome.code, "missing_entity");
  assert.deepEqual(orphan.state.issues, [orphan.outcome]);
  assert.equal(applyAgentEvent(orphan.state, start).outcome, "duplicate");
});

test("a run id such as __proto__ is an ordinary key", () => {
  const e = eventFactory("s", "__proto__");
  for (const fold of Object.values(FOLDS)) {
    const state = fold([e.create("run.started", {}), e.create("run.completed", {})]);
    assert.deepEqual(Object.keys(state.lastSequenceByRun), ["__proto__"]);
    assert.equal(Object.getPrototypeOf(state.lastSequenceByRun), Object.prototype);
    assert.equal(state.runs.__proto__.status, "completed");
  }
});

test("message projection", () => {
  const e = eventFactory("s", "r");
  const state = foldPure([
    e.create("run.started", {}),
    e.create("message.started", { messageId: "u1", role: "user", content: "hi" }),
    e.create("message.started", { messageId: "u2", role: "user" }),
    e.create("message.completed", { messageId: "u2" }),
    e.create("message.started", { messageId: "a1", role: "assistant" }),
    e.create("message.completed", { messageId: "a1" }),
    e.create("message.started", { messageId: "a2", role: "assistant" }),
    e.create("message.failed", { messageId: "a2", error: { message: "x" } }),
    e.create("message.started", { messageId: "a3", role: "assistant" }),
    e.create("message.cancelled", { messageId: "a3" }),
    e.create("message.started", { messageId: "a4", role: "assistant" }),
    e.create("task.created", { taskId: "t", title: "T" }),
  ]);
  const withGhost = { ...state,
    order: [...state.order, { kind: "message", id: "ghost", runId: "r" }] };
  assert.deepEqual(projectMessages(withGhost).map((m) => [m.id, m.status]), [
    ["1:ru1", "local"], ["1:ru2", "local"], ["1:ra1", "success"], ["1:ra2", "error"],
    ["1:ra3", "abort"], ["1:ra4", "updating"]]);
});
