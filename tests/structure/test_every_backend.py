"""Gateway tests run on every backend: a test that runs a gateway, by any way, outside the
backend parametrization fails unless it says, with ``only_backend`` and a reason, that it holds
on one backend only (``tests/backend_guard.py``)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.backend_guard import gateway_command

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("every_backend_cases.py")

#: Each unmarked way to run a gateway (``every_backend_cases.py``) -> what its failure names.
OFF = {
    "test_off_launch": "(Gateway.start) without the backend parametrization",
    "test_off_start_server": "(Gateway.start) without",
    "test_off_uvicorn_in_the_tests_loop": "(Gateway.start) without",
    "test_off_uvicorn_in_a_thread": "(Gateway.start) without",
    "test_off_serve_asgi_without_lifespan": "(the app answered http) without",
    "test_off_asgi_transport": "(the app answered http) without",
    "test_off_test_client": "(Gateway.start) without",
    "test_off_a_gateway_object": "(Gateway.start) without",
    "test_off_cli_serve_process": " -m app.cli serve --port ",
    "test_off_cli_executable_process": "agent-gateway serve --port ",
    "test_off_gateway_module_process": " -m tests.app.support.redis_support --port ",
    "test_off_another_backend_than_the_tests[redis]": "memory (Gateway.start) in its [redis] run",
}
OK = {
    "test_off_another_backend_than_the_tests[memory]",
    "test_ok_start_gateway[memory]",
    "test_ok_start_gateway[redis]",
    "test_ok_marked",
    "test_ok_an_app_built_not_started",
    "test_ok_another_process",
}


def _outcomes(report: Path) -> dict[str, str]:
    """Test name -> the text of its failures and errors ("" when it passed)."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        text = "".join(
            (bad.get("message") or "") + (bad.text or "")
            for bad in case
            if bad.tag in ("failure", "error")
        )
        name = case.get("name", "")
        outcomes[name] = outcomes.get(name, "") + text
    return outcomes


def test_the_guard_fails_every_way_to_run_a_gateway_off_the_backends(tmp_path: Path) -> None:
    report = tmp_path / "cases.xml"
    pytest_args = ["-p", "no:cacheprovider", "-n", "0", "-q", f"--junitxml={report}", str(CASES)]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcomes = _outcomes(report)
    assert set(outcomes) == set(OFF) | OK, done.stdout[-4000:]
    let_pass = [name for name in OFF if not outcomes[name]]
    assert not let_pass, f"the guard let these pass: {let_pass}"
    for name, names in OFF.items():
        assert "started a gateway on " in outcomes[name], (name, outcomes[name][-2000:])
        assert names in outcomes[name], (name, outcomes[name][-2000:])
        assert "only_backend(" in outcomes[name], name
    for name in OK:
        assert outcomes[name] == "", (name, outcomes[name][-2000:])


@pytest.mark.parametrize(
    ("argv", "serves"),
    [
        (["python", "-m", "app.cli", "serve", "--port", "1"], True),
        ("/venv/bin/agent-gateway serve --host 0.0.0.0", True),
        (["python", "-m", "tests.app.archive.redis_serve", "--port", "1"], True),
        (["python", "-m", "app.cli", "replay", "x.jsonl"], False),
        (["python", "-m", "app.cli", "migrate", "--config", "serve.toml"], False),
        (["python", "-m", "pytest", "tests/app/test_serve.py"], False),
        (["redis-server", "--port", "1"], False),
    ],
)
def test_a_gateway_command_is_told_from_other_processes(
    argv: list[str] | str, serves: bool
) -> None:
    assert (gateway_command(argv) is not None) is serves
