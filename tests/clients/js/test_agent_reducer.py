"""clients/js/src/agent-reducer.js under Node: the conformance cases, and agreement with core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.clients.js.support import core_view, run_node_tests, seeded_streams, to_json_safe

STREAMS = 300
SEED = 20260107


def test_conformance_cases_pass_under_node() -> None:
    run = run_node_tests("conformance.test.js")
    assert run.returncode == 0, run.output
    assert run.counts["fail"] == 0 and run.counts["skipped"] == 0, run.output
    assert run.counts["pass"] >= 20, run.output  # two folds x eight reducer cases, and more


def test_node_reducer_agrees_with_core_on_seeded_random_streams(tmp_path: Path) -> None:
    streams = seeded_streams(STREAMS, SEED)
    cases: list[dict[str, Any]] = [
        {"events": events, "expected": core_view(events)} for events in streams
    ]

    # The streams exercise every path, so agreement means something: valid and invalid
    # events, accepted events, issues of every code, and runs in every status.
    events = [e for c in cases for e in c["events"]]
    verdicts = [v for c in cases for v in c["expected"]["validity"]]
    states = [c["expected"]["state"] for c in cases]
    accepted = sum(len(s["processedEventIds"]) - len(s["issues"]) for s in states)
    assert len(streams) == STREAMS and len(events) > 4_000
    assert 0.1 < verdicts.count(None) / len(verdicts) < 0.95
    assert accepted > 1_500
    assert {i["code"] for s in states for i in s["issues"]} == {
        "duplicate_entity",
        "invalid_sequence",
        "invalid_transition",
        "missing_entity",
        "missing_run",
    }
    assert {r["status"] for s in states for r in s["runs"].values()} == {
        "running",
        "completed",
        "failed",
        "cancelled",
    }

    fixture = tmp_path / "agreement.json"
    fixture.write_text(json.dumps({"cases": to_json_safe(cases)}, allow_nan=False))
    run = run_node_tests("agreement.test.js", env={"AGENT_REDUCER_AGREEMENT": str(fixture)})
    assert run.returncode == 0, run.output[-6000:]
    assert run.counts["fail"] == 0 and run.counts["skipped"] == 0, run.output[-6000:]
    assert run.counts["pass"] == 4, run.output[-6000:]
