"""Every domain error of ``app.errors`` answers the status and body http-api.md's registry names."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson
import pytest
import websockets

from app import errors
from app.api.errors import STATUS, ApiError, error_response
from app.errors import GatewayError
from tests.app.support.agui_client import run_input, user
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.scripted_provider import ScriptedProvider

SPEC = Path(__file__).resolve().parents[3] / "docs" / "spec" / "http-api.md"


def _registry() -> tuple[dict[str, int], set[str]]:
    """The "Errors" table of the spec: each code's status, and the codes sent with
    ``Retry-After``."""
    text = SPEC.read_text().split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    status: dict[str, int] = {}
    retry_after: set[str] = set()
    for row in re.findall(r"^\|\s*(\d{3})\s*\|(.+?)\|(.*)\|$", text, re.MULTILINE):
        codes = re.findall(r"`([a-z_]+)`", row[1])
        for code in codes:
            status[code] = int(row[0])
        if "Retry-After" in row[2]:
            retry_after.update(codes)
    return status, retry_after


REGISTRY, WITH_RETRY_AFTER = _registry()


def _domain_errors(cls: type[GatewayError] = GatewayError) -> list[type[GatewayError]]:
    found: list[type[GatewayError]] = []
    for sub in cls.__subclasses__():
        if sub.__module__ == errors.__name__:
            found.append(sub)
        found.extend(_domain_errors(sub))
    return found


DOMAIN_ERRORS = _domain_errors()


def test_the_registry_and_the_domain_errors_are_read() -> None:
    assert REGISTRY["run_not_running"] == 409 and REGISTRY["backend_unavailable"] == 503
    assert {"rate_limited", "queue_full"} <= WITH_RETRY_AFTER
    assert errors.RunNotRunning in DOMAIN_ERRORS and ApiError not in DOMAIN_ERRORS
    assert {cls.code for cls in DOMAIN_ERRORS} == set(errors.BY_CODE)
    assert len({cls.code for cls in DOMAIN_ERRORS}) == len(DOMAIN_ERRORS), "a code is reused"


@pytest.mark.parametrize("cls", DOMAIN_ERRORS, ids=lambda cls: cls.__name__)
def test_a_domain_error_answers_what_the_spec_names(cls: type[GatewayError]) -> None:
    assert cls.code in REGISTRY, f"{cls.code} is missing from http-api.md's error registry"
    assert cls in STATUS, f"{cls.__name__} has no HTTP status in app/api/errors.py"
    assert STATUS[cls] == REGISTRY[cls.code]
    assert errors.BY_CODE[cls.code] is cls

    plain = error_response(cls("Something is wrong."))
    assert plain.status_code == REGISTRY[cls.code]
    assert orjson.loads(plain.body) == {
        "error": {"code": cls.code, "message": "Something is wrong."}
    }
    assert "retry-after" not in plain.headers

    full = error_response(cls("Again.", details={"version": 3}, retry_after=7))
    assert full.status_code == REGISTRY[cls.code]
    assert orjson.loads(full.body) == {
        "error": {"code": cls.code, "message": "Again.", "details": {"version": 3}}
    }
    assert full.headers["retry-after"] == "7"


def test_an_api_error_keeps_its_own_status_and_headers() -> None:
    response = error_response(ApiError(415, "unsupported_media_type", "No.", headers={"X-A": "b"}))
    assert response.status_code == 415 and response.headers["x-a"] == "b"
    assert orjson.loads(response.body) == {
        "error": {"code": "unsupported_media_type", "message": "No."}
    }


async def test_http_websocket_and_ag_ui_answer_a_domain_error_alike(
    start_gateway: StartGateway,
) -> None:
    gw = await start_gateway(make_settings(), providers={"demo": ScriptedProvider()})
    expected = {"code": "unknown_provider", "message": 'Unknown provider "nope".'}
    async with gw.client() as client:
        runs = await client.post(
            "/v1/conversations/e1/runs", json={"input": {"prompt": "x"}, "provider": "nope"}
        )
        agui = await client.post("/v1/ag-ui/nope", json=run_input("e1", "r1", [user("x")]))
    assert (runs.status_code, runs.json()) == (404, {"error": expected})
    assert (agui.status_code, agui.json()) == (404, {"error": expected})
    async with websockets.connect(f"{gw.ws_url}/v1/conversations/e1/ws") as ws:
        await asyncio.wait_for(ws.recv(), 10)  # the snapshot
        await ws.send(
            orjson.dumps({"op": "request", "input": {"prompt": "x"}, "provider": "nope"}).decode()
        )
        frame = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    assert frame == {"type": "error", **expected, "op": "request"}
