// Agreement with the gateway's Python core on seeded random event streams, valid and invalid.
//
// tests/clients/js/test_agent_reducer.py writes the streams, each with what `core` made of it
// (per-event validity, the final AgentState, the message projection, isRequesting), to the
// JSON file named by AGENT_REDUCER_AGREEMENT, then runs this file. Non-finite numbers, which
// JSON cannot carry, arrive as {"$number": "Infinity" | "-Infinity" | "NaN"}.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { isRequesting, projectMessages, validateEvent } from "../src/agent-reducer.js";
import { FOLDS } from "./support.js";

const FIXTURE = process.env.AGENT_REDUCER_AGREEMENT;
const NUMBERS = { Infinity, "-Infinity": -Infinity, NaN };

function load(path) {
  return JSON.parse(readFileSync(path, "utf8"), (_key, value) => {
    if (value !== null && typeof value === "object" && !Array.isArray(value)
      && Object.keys(value).length === 1 && typeof value.$number === "string") {
      return NUMBERS[value.$number];
    }
    return value;
  });
}

const skip = FIXTURE ? false : "needs the streams from Python: pytest tests/clients/js";
const cases = FIXTURE ? load(FIXTURE).cases : [];

// Compare every case; report the first few that differ with what is needed to replay them.
function agree(what, compute) {
  const failures = [];
  for (const [index, c] of cases.entries()) {
    try {
      assert.deepStrictEqual(compute(c), c.expected[what]);
    } catch (err) {
      failures.push(`case ${index} (${c.events.length} events): ${err.message}`);
      if (failures.length === 3) break;
    }
  }
  assert.ok(cases.length > 0, "the fixture holds no cases");
  assert.deepEqual(failures, [], `${what} differs from core:\n${failures.join("\n\n")}`);
}

test("every event has the same validity (path and reason) as core's validate_event", { skip }, () => {
  agree("validity", (c) => c.events.map(validateEvent));
});

for (const [name, fold] of Object.entries(FOLDS)) {
  test(`the ${name} fold ends in core's AgentState`, { skip }, () => {
    agree("state", (c) => fold(c.events));
  });
}

test("the message projection and isRequesting match core's", { skip }, () => {
  agree("messages", (c) => projectMessages(FOLDS.pure(c.events)));
  agree("requesting", (c) => isRequesting(FOLDS.pure(c.events)));
});
