"""``agent-gateway serve | check-config | openapi`` and the committed OpenAPI document."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.cli.gateway import OPENAPI_PATH, render_openapi
from app.cli.main import main
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_committed_openapi_is_current() -> None:
    assert OPENAPI_PATH.read_text(encoding="utf-8") == render_openapi(), (
        "openapi/openapi.json is stale: run `agent-gateway openapi` (make openapi)"
    )


def test_openapi_lists_every_route() -> None:
    paths = json.loads(render_openapi())["paths"]
    base = "/v1/conversations/{conversationKey}"
    for path in (
        "/runs",
        "/abort",
        "/reload",
        "/events",
        "/state",
        "",
        "/approvals/{approvalId}",
        "/tools/{toolCallId}/result",
        "/tools/{toolCallId}/retry",
    ):
        assert base + path in paths
    assert {"/v1/providers", "/healthz", "/readyz", "/v1/conversations"} <= set(paths)
    agui = paths["/v1/ag-ui/{provider}"]["post"]
    assert "text/event-stream" in agui["responses"]["200"]["content"]
    assert "RunAgentInput" in str(agui["requestBody"])
    assert set(paths[base + "/runs"]["post"]["responses"]) >= {
        "202",
        "404",
        "409",
        "413",
        "415",
        "422",
        "429",
    }


def test_openapi_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["openapi", "--output", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["info"]["title"] == "Agent Event Gateway"


def test_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[gateway]\nmultitask = "enqueue"\n[providers.extra]\nkind = "local-demo"\n')
    assert main(["check-config", str(good)]) == 0
    assert "providers=demo, extra" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text('[gateway]\nbackend = "mongo"\n')
    assert main(["check-config", str(bad)]) == 1
    assert "gateway.backend" in capsys.readouterr().err
    assert main(["check-config", str(tmp_path / "missing.toml")]) == 1
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.only_backend(
    "memory", reason="`serve` without a config file runs the default backend: memory"
)
def test_serve_without_config_serves_the_demo_provider() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_GATEWAY_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/v1/providers", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, "serve exited"
                assert time.monotonic() < deadline, "serve did not come up"
                time.sleep(0.1)
        providers = response.json()["providers"]
        assert [(p["name"], p["kind"], p["default"]) for p in providers] == [
            ("demo", "local-demo", True)
        ]
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200
    finally:
        proc.terminate()
        # uvicorn shuts down gracefully, then re-raises the captured SIGTERM
        assert proc.wait(timeout=20) in (0, -15)
