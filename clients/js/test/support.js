// Test helpers: an event factory (as core.EventFactory) and the two ways to fold events.
import { applyAgentEvent, createInitialAgentState, reduceAgentState } from "../src/agent-reducer.js";

/** Events of one run: eventId `${runId}:${sequence}:${type}`, sequence counting from 0. */
export function eventFactory(sessionId, runId, now = () => 0) {
  let next = 0;
  return {
    create(type, payload, { eventId, sequence, parentId, meta } = {}) {
      const seq = sequence ?? next;
      next = seq + 1;
      const event = {
        protocolVersion: "0.1", type, eventId: eventId ?? `${runId}:${seq}:${type}`,
        sessionId, runId, sequence: seq, timestamp: now(), payload,
      };
      if (parentId !== undefined) event.parentId = parentId;
      if (meta !== undefined) event.meta = meta;
      return event;
    },
  };
}

export function foldPure(events, state = createInitialAgentState()) {
  return events.reduce(reduceAgentState, state);
}

export function foldApply(events, state = createInitialAgentState()) {
  let current = state;
  for (const event of events) current = applyAgentEvent(current, event).state;
  return current;
}

/** Every fold, by name: conformance tests run against each. */
export const FOLDS = { pure: foldPure, apply: foldApply };
